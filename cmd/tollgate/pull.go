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
		vflags   verifyFlags
		destPath string
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "pull registry://HOST/REPOSITORY[:TAG][@sha256:DIGEST]",
		Short: "Pull a policy module into the local store",
		Long: `Pull a policy module from an OCI registry into the local store (shared with
run, bench, inspect and serve), verifying every digest. Accepts Kubewarden's
layout and the CNCF Wasm layout (application/wasm layer). With -o, also write
the module to FILE. Progress goes to stderr for long downloads.

With verification flags (those of verify: -k, -a, --cert-email with
--cert-oidc-issuer, --github-owner, --verification-config-path), or when the
default verification config file exists (as kwctl), the module's signatures
are verified first and the module is pulled by the verified digest; a module
that does not satisfy the config is not stored (exit status 1).`,
		Example: `  tollgate pull registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1
  tollgate pull registry://127.0.0.1:5000/policies/mine@sha256:… -o mine.wasm
  tollgate pull registry://ghcr.io/acme/policies/p:v1 --github-owner acme`,
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
			uri := args[0]
			v, err := vflags.verifier(c)
			if err != nil {
				return err
			}
			var verified string
			if v != nil {
				r, err := v.Verify(cmd.Context(), uri)
				if err != nil {
					return verifyError(err)
				}
				for _, s := range r.Satisfied {
					fmt.Fprintln(cmd.ErrOrStderr(), "satisfied:", s)
				}
				uri, verified = r.URI, r.Digest // the tag cannot move between the two
			}
			e, err := c.Pull(cmd.Context(), uri, progress)
			if err != nil {
				return err
			}
			if verified != "" && e.Digest != verified {
				return fmt.Errorf("%s: pulled manifest %s, verified %s", args[0], e.Digest, verified)
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
	vflags.register(cmd.Flags())
	cmd.Flags().StringVarP(&destPath, "output-path", "o", "", "also write the module to this file")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}
