package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func newPullCmd() *cobra.Command {
	var (
		flags    ociFlags
		destPath string
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "pull registry://HOST/REPOSITORY[:TAG][@sha256:DIGEST]",
		Short: "Pull a policy module into the local store",
		Long: `Pull a policy module from an OCI registry into the local store (shared with
run, bench, inspect and serve), verifying every digest. Accepts Kubewarden's
layout and the CNCF Wasm layout (application/wasm layer). With -o, also write
the module to FILE. Progress goes to stderr for long downloads.`,
		Example: `  tollgate pull registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1
  tollgate pull registry://127.0.0.1:5000/policies/mine@sha256:… -o mine.wasm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client()
			if err != nil {
				return err
			}
			var progress io.Writer
			if !quiet {
				progress = cmd.ErrOrStderr()
			}
			e, err := c.Pull(cmd.Context(), args[0], progress)
			if err != nil {
				return err
			}
			if destPath != "" {
				src, err := os.Open(e.Path)
				if err != nil {
					return err
				}
				defer src.Close()
				if err := writeFileAtomic(destPath, func(f *os.File) error {
					_, err := io.Copy(f, src)
					return err
				}); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s %d bytes\n", e.URI, e.Digest, e.Size)
			return err
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVarP(&destPath, "output-path", "o", "", "also write the module to this file")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}
