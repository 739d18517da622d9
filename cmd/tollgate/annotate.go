package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/metadata"
)

func newAnnotateCmd() *cobra.Command {
	var metadataPath, usagePath, out string
	cmd := &cobra.Command{
		Use:   "annotate -m metadata.yml [-u README.md] -o OUT IN",
		Short: "Embed Kubewarden metadata into a policy module",
		Long: `Validate a metadata.yml (Kubewarden's format) and write it into the module's
io.kubewarden.metadata custom section, replacing any previous one. With -u, the
file's content becomes the io.kubewarden.policy.usage annotation. Modules
annotated here load in Kubewarden, and the other way round.`,
		Example: `  tollgate annotate -m metadata.yml -u README.md -o annotated.wasm policy.wasm`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			md, err := metadata.ParseFile(metadataPath)
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
	_ = cmd.MarkFlagRequired("metadata-path")
	_ = cmd.MarkFlagRequired("output-path")
	return cmd
}
