package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newPoliciesCmd() *cobra.Command {
	var (
		flags  ociFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "policies",
		Short: "List the policy modules in the local store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			entries, err := c.Store().List()
			if err != nil {
				return err
			}
			if output != "" {
				return printData(cmd.OutOrStdout(), output, entries)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "URI\tDIGEST\tSIZE\tTITLE")
			for _, e := range entries {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", e.URI, e.Digest, e.Size, e.Title)
			}
			return w.Flush()
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: a table)")
	return cmd
}
