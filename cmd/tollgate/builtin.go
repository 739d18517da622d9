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

// shareInstances says which modules serve shares instances of between
// policies: the settings-keyed built-in modules (host/builtin.IsSettingsKeyed),
// whatever URI names them.
var shareInstances = builtin.IsSettingsKeyed
