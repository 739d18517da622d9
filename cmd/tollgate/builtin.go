package main

import (
	"github.com/tollgate-dev/tollgate/host/builtin"
	"github.com/tollgate-dev/tollgate/host/module"
)

// builtin:// resolves to the modules compiled into this binary, with their
// digests computed at build time.
func init() {
	resolverHooks = append(resolverHooks, func(r *module.Resolver) {
		r.Builtin = builtin.Module
		r.BuiltinDigest = builtin.Digest
	})
}
