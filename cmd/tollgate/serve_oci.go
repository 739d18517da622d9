package main

import (
	"log/slog"
	"path/filepath"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/oci"
)

// serveRegistry is serve's registry:// fetcher: credentials from
// --docker-config-json-path, sources.yml as the server's configuration read
// it, and the module store under --cache-dir (default store
// when --cache-dir is empty), so a restart does not pull again what is
// pinned by digest.
func serveRegistry(o *config.Options, sources *oci.Sources, logger *slog.Logger) module.RegistryFetcher {
	store := ""
	if o.CacheDir != "" {
		store = filepath.Join(o.CacheDir, "store")
	}
	return newRegistryFetcher(store, "", o.DockerConfigJSONPath, sources, logger)
}
