package main

import (
	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/admission"
)

func newRunCmd() *cobra.Command {
	var (
		in     inputFlags
		rt     runtimeFlags
		caps   capabilityFlags
		vf     verifyFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "run MODULE -r REQUEST",
		Short: "Evaluate a policy on one request and print the AdmissionResponse",
		Long: `Evaluate a policy module on one request and print the AdmissionResponse a
webhook would return: uid, allowed, patchType and patch (base64 JSONPatch) when
the policy mutates, status{message,code}, auditAnnotations and warnings.

MODULE is a path, file://, https://, registry:// or builtin:// URI, or a
ClusterAdmissionPolicy or AdmissionPolicy manifest (.yaml/.yml, policies.kubewarden.io
or policies.tollgate.dev): its spec.module runs with its spec.settings (unless -s or
--settings-json is given) and, for a ClusterAdmissionPolicy, --allow-context-aware
lets it read its spec.contextAwareResources instead of the module's metadata's.
REQUEST is an AdmissionReview or a bare AdmissionRequest (- reads stdin); with
--raw (or a policy whose metadata says policyType: raw) any JSON, also in the
{"request": ...} form of the validate_raw endpoint.

The default output is one line of compact JSON, as kwctl prints it.
Exit status: 0 when the policy was evaluated (accepted or not), 1 otherwise
(settings rejected, module or input errors, trap, timeout).`,
		Example: `  tollgate run examples/capabilities-drop/policy.wasm -r examples/capabilities-drop/testdata/pod-adds-capabilities.json
  tollgate run policy.wasm -r review.json -s settings.yaml -o yaml
  cat review.json | tollgate run policy.wasm -r - --settings-json '{"mandatory_labels":["team"]}'
  tollgate run policy.wasm -r review.json --allow-context-aware --kubeconfig ~/.kube/config --record-host-capabilities-interactions session.yml
  tollgate run policy.wasm -r review.json --allow-context-aware --replay-host-capabilities-interactions session.yml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			ctx := cmd.Context()
			p, err := prepare(ctx, cmd, args[0], &in, &rt, &caps, &vf, 1)
			if err != nil {
				return err
			}
			defer p.close(ctx)
			res, err := p.evaluate(ctx)
			if err != nil {
				return err
			}
			return printData(cmd.OutOrStdout(), output, admission.FromVerdict(p.uid, res.Verdict()))
		},
	}
	in.register(cmd)
	rt.register(cmd)
	caps.register(cmd)
	vf.register(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json (indented) or yaml; default one line of JSON")
	return cmd
}
