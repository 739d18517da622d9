package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/metadata"
)

func newAnnotateCmd() *cobra.Command {
	var (
		metadataPath, usagePath, out string
		rt                           runtimeFlags
	)
	cmd := &cobra.Command{
		Use:   "annotate -m metadata.yml [-u README.md] -o OUT IN",
		Short: "Embed Kubewarden metadata into a policy module",
		Long: `Validate a metadata.yml (Kubewarden's format) and write it into the module's
io.kubewarden.metadata custom section, replacing any previous one. With -u, the
file's content becomes the io.kubewarden.policy.usage annotation. When
metadata.yml has no protocolVersion, the module is asked for it (its waPC
protocol_version operation), as kwctl does. Modules annotated here load in
Kubewarden, and the other way round.`,
		Example: `  tollgate annotate -m metadata.yml -u README.md -o annotated.wasm policy.wasm`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			md, err := metadata.DecodeFile(metadataPath)
			if err != nil {
				return err
			}
			usage := ""
			if usagePath != "" {
				b, err := os.ReadFile(usagePath)
				if err != nil {
					return fmt.Errorf("usage: %w", err)
				}
				usage = string(b)
			}
			wasmBytes, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if md.ProtocolVersion == "" && md.Mode() != metadata.ExecutionModeWapc {
				md.ProtocolVersion = metadata.ProtocolVersionUnknown // as kwctl annotate writes it
			}
			if md.ProtocolVersion == "" && md.Mode() == metadata.ExecutionModeWapc {
				ctx := cmd.Context()
				h, err := rt.newHost(ctx)
				if err != nil {
					return err
				}
				md.ProtocolVersion, err = h.ProtocolVersion(ctx, wasmBytes)
				_ = h.Close(ctx)
				if err != nil {
					return fmt.Errorf("%s: metadata.yml has no protocolVersion and the module cannot tell it: %w", args[0], err)
				}
			}
			if err := md.Validate(); err != nil {
				return fmt.Errorf("%s: %w", metadataPath, err)
			}
			annotated, err := metadata.Annotate(wasmBytes, md, usage)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			tmp, err := os.CreateTemp(filepath.Dir(out), ".annotate-*")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			if _, err := tmp.Write(annotated); err != nil {
				tmp.Close()
				return err
			}
			if err := tmp.Close(); err != nil {
				return err
			}
			if err := os.Chmod(tmp.Name(), 0o644); err != nil {
				return err
			}
			return os.Rename(tmp.Name(), out)
		},
	}
	cmd.Flags().StringVarP(&metadataPath, "metadata-path", "m", "", "metadata.yml to embed")
	cmd.Flags().StringVarP(&usagePath, "usage-path", "u", "", "file whose content becomes the usage annotation (e.g. README.md)")
	cmd.Flags().StringVarP(&out, "output-path", "o", "", "where to write the annotated module")
	cmd.Flags().StringVar(&rt.cacheDir, "cache-dir", "", "compilation cache directory")
	cmd.Flags().BoolVar(&rt.noCache, "no-cache", false, "do not use the on-disk compilation cache")
	_ = cmd.MarkFlagRequired("metadata-path")
	_ = cmd.MarkFlagRequired("output-path")
	return cmd
}
