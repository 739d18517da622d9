package main

import (
	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "tollgate",
		Short: "Run Kubernetes admission policies compiled to WebAssembly",
		Long: `tollgate runs Kubernetes admission policies compiled to WebAssembly
(Kubewarden-compatible waPC modules): evaluate them from the command line,
benchmark them, annotate and inspect their metadata, and serve them as an
HTTPS admission webhook.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newRunCmd(),
		newBenchCmd(),
		newInspectCmd(),
		newAnnotateCmd(),
		newServeCmd(),
		newControllerCmd(),
		newAuditCmd(),
		newRolloutCmd(),
		newScaffoldCmd(),
		newPushCmd(),
		newPullCmd(),
		newVerifyCmd(),
		newPoliciesCmd(),
		newRmCmd(),
		newDigestCmd(),
		newSaveCmd(),
		newLoadCmd(),
		newVersionCmd(),
	)
	addOCIPersistentFlags(root)
	return root
}
