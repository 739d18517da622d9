package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newRmCmd() *cobra.Command {
	var flags ociFlags
	cmd := &cobra.Command{
		Use:   "rm registry://URI|sha256:DIGEST...",
		Short: "Remove policy modules from the local store",
		Long: `Remove policy modules from the local store, by the URI they were pulled as or by
manifest (or module) digest; blobs no remaining module uses are deleted.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client()
			if err != nil {
				return err
			}
			for _, a := range args {
				removed, err := c.Store().Remove(a)
				if err != nil {
					return err
				}
				for _, e := range removed {
					fmt.Fprintf(cmd.OutOrStdout(), "removed %s %s\n", e.URI, e.Digest)
				}
			}
			return nil
		},
	}
	flags.register(cmd.Flags())
	return cmd
}
