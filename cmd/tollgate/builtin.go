package main

import (
	"github.com/tollgate-dev/tollgate/host/builtin"
	"github.com/tollgate-dev/tollgate/host/module"
)

// builtin:// resolves to the modules compiled into this binary.
func init() {
	resolverHooks = append(resolverHooks, func(r *module.Resolver) { r.Builtin = builtin.Module })
}
