package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/oci"
)

func newDigestCmd() *cobra.Command {
	var flags ociFlags
	cmd := &cobra.Command{
		Use:   "digest registry://HOST/REPOSITORY:TAG",
		Short: "Print the manifest digest a registry has for a module",
		Long: `Ask the registry (without downloading the module) for the manifest digest of a
registry:// URI and print the URI pinned to it, ready for policies.yml.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client()
			if err != nil {
				return err
			}
			d, err := c.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ref, _ := oci.ParseURI(args[0])
			ref.Digest = d
			_, err = fmt.Fprintln(cmd.OutOrStdout(), ref.String())
			return err
		},
	}
	flags.register(cmd.Flags())
	return cmd
}
