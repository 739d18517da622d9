package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/oci"
)

func newPushCmd() *cobra.Command {
	var (
		flags  ociFlags
		force  bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "push FILE registry://HOST/REPOSITORY:TAG",
		Short: "Push a policy module to an OCI registry",
		Long: `Push a Wasm policy module to an OCI registry in Kubewarden's artifact layout
(config application/vnd.wasm.config.v1+json, one layer
application/vnd.wasm.content.layer.v1+wasm). The module's metadata annotations
become manifest annotations (io.kubewarden.policy.source also as
org.opencontainers.image.source). A module without metadata is refused unless
--force. Prints the manifest digest; the same module always gets the same digest.`,
		Example: `  tollgate annotate -m metadata.yml -o annotated.wasm policy.wasm
  tollgate push annotated.wasm registry://ghcr.io/me/policies/my-policy:v1.0.0`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			d, err := c.Push(cmd.Context(), wasm, args[1], oci.PushOptions{Force: force})
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if output != "" {
				ref, _ := oci.ParseURI(args[1])
				ref.Digest = d
				return printData(cmd.OutOrStdout(), output, map[string]string{"uri": args[1], "digest": d, "pinned": ref.String()})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), d)
			return err
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().BoolVar(&force, "force", false, "push a module that has no Kubewarden metadata")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: the digest alone)")
	return cmd
}
