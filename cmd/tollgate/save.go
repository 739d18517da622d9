package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/oci"
)

func newSaveCmd() *cobra.Command {
	var (
		flags ociFlags
		out   string
	)
	cmd := &cobra.Command{
		Use:   "save -o BUNDLE.tar registry://URI...",
		Short: "Write policy modules to a tarball for air-gapped clusters",
		Long: `Write policy modules from the local store (pulling any that are missing) to a
tar of an OCI image layout. Carry it to the air-gapped side and run tollgate load.`,
		Example: `  tollgate save -o policies.tar registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("save: -o BUNDLE.tar is required")
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			for _, uri := range args {
				if _, err := c.Store().Lookup(uri); err == nil {
					continue
				} else if !errors.Is(err, oci.ErrNotInStore) {
					return err
				}
				if _, err := c.Pull(cmd.Context(), uri, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			if err := writeFileAtomic(out, func(f *os.File) error { return c.Store().Save(f, args...) }); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "saved %d module(s) to %s\n", len(args), out)
			return err
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVarP(&out, "output", "o", "", "bundle file to write (required)")
	return cmd
}
