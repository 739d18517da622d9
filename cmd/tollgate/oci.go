package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/oci"
)

// ociFlags are the registry and store flags (kwctl's names where kwctl has them).
type ociFlags struct {
	storePath     string
	sourcesPath   string
	dockerConfig  string
	maxModuleSize int64
	logLevel      string
}

func (f *ociFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.storePath, "store-path", "", "local policy store (default "+oci.DefaultStorePath()+")")
	fs.StringVar(&f.sourcesPath, "sources-path", "", "sources.yml: insecure_sources and source_authorities (default "+oci.DefaultSourcesPath()+" if present)")
	fs.StringVar(&f.dockerConfig, "docker-config-json-path", "", "Docker config.json with registry credentials (default $DOCKER_CONFIG/config.json or ~/.docker/config.json)")
	fs.Int64Var(&f.maxModuleSize, "max-module-size", oci.DefaultMaxModuleSize, "largest Wasm module accepted from a registry or bundle, in bytes")
}

func (f *ociFlags) client() (*oci.Client, error) {
	return oci.NewClient(oci.Options{
		StorePath:        f.storePath,
		SourcesPath:      f.sourcesPath,
		DockerConfigPath: f.dockerConfig,
		MaxModuleSize:    f.maxModuleSize,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
}

// ociGlobal backs the root command's persistent registry flags, which make
// registry:// modules follow --store-path, --sources-path and
// --docker-config-json-path in run, bench, inspect and serve.
var ociGlobal ociFlags

// addOCIPersistentFlags registers the registry flags on the root command
// (root.go calls it).
func addOCIPersistentFlags(root *cobra.Command) { ociGlobal.register(root.PersistentFlags()) }

func init() {
	resolverHooks = append(resolverHooks, func(r *module.Resolver) {
		r.Registry = &oci.Lazy{Open: ociGlobal.client}
	})
}

// writeFileAtomic writes a file through a temporary file in the same directory.
func writeFileAtomic(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
