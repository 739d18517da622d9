package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/oci"
)

// serveRegistry is serve's registry:// fetcher: credentials from
// --docker-config-json-path, sources.yml as parsed by the server's
// configuration, and the module store under --cache-dir (default store
// when --cache-dir is empty), so a restart does not pull again what is
// pinned by digest.
func serveRegistry(o *config.Options, src config.Sources, logger *slog.Logger) (module.RegistryFetcher, error) {
	auth := map[string][]oci.SourceAuthority{}
	for host, certs := range src.SourceAuthorities {
		for _, c := range certs {
			if c.Path != "" {
				auth[host] = append(auth[host], oci.SourceAuthority{Type: "Path", Path: c.Path})
			} else {
				auth[host] = append(auth[host], oci.SourceAuthority{Type: "Data", Data: string(c.Data)})
			}
		}
	}
	sources, err := oci.NewSources(src.InsecureSources, auth)
	if err != nil {
		return nil, fmt.Errorf("--sources-path: %w", err)
	}
	store := ""
	if o.CacheDir != "" {
		store = filepath.Join(o.CacheDir, "store")
	}
	return newRegistryFetcher(store, "", o.DockerConfigJSONPath, sources, logger), nil
}
