package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newLoadCmd() *cobra.Command {
	var flags ociFlags
	cmd := &cobra.Command{
		Use:   "load BUNDLE.tar",
		Short: "Import policy modules from a tarball written by save",
		Long: `Import the policy modules of a bundle written by tollgate save into the local
store, verifying every digest. run, bench and serve then find them by the same
registry:// URIs without reaching the registry (pin them by digest in policies.yml).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client()
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			added, err := c.Store().Load(f, c.MaxModuleSize())
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			for _, e := range added {
				fmt.Fprintf(cmd.OutOrStdout(), "loaded %s %s\n", e.URI, e.Digest)
			}
			return nil
		},
	}
	flags.register(cmd.Flags())
	return cmd
}
