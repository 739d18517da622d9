package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/crds/rollout"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

// rolloutFlags are the flags both rollout verbs share.
type rolloutFlags struct {
	kubeconfig, kubeContext, namespace string
}

func (f *rolloutFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (in-cluster configuration, then the usual kubeconfig rules, when empty)")
	fs.StringVar(&f.kubeContext, "context", "", "kubeconfig context")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "namespace of an AdmissionPolicy or AdmissionPolicyGroup")
}

// policy returns a client and the policy args name.
func (f *rolloutFlags) policy(cmd *cobra.Command, args []string) (client.Client, v1.Policy, error) {
	cfg, err := kubeclient.Config(f.kubeconfig, f.kubeContext)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := rollout.NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	p, err := rollout.Get(cmd.Context(), c, args, f.namespace)
	return c, p, err
}

func newRolloutCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show a policy's revisions and roll it back to one (kubectl rollout for policies)",
		Long: `rollout reads the revisions the controller keeps for each policy: every change of the
module digest or settings it serves is a ControllerRevision owned by the policy (at most
spec.revisionHistoryLimit old ones, default 10), numbered as kubectl numbers a Deployment's.

POLICY is KIND/NAME or KIND NAME (KIND: clusteradmissionpolicy or cap, admissionpolicy or
ap, clusteradmissionpolicygroup or capg, admissionpolicygroup or apg), or a NAME that only
one policy has; --namespace for the namespaced kinds.`,
	}
	cmd.AddCommand(newRolloutHistoryCmd(), newRolloutUndoCmd())
	return cmd
}

func newRolloutHistoryCmd() *cobra.Command {
	f := &rolloutFlags{}
	var revision int64
	var output string
	cmd := &cobra.Command{
		Use:   "history POLICY",
		Short: "List a policy's revisions (REVISION, CHANGE-CAUSE), or show one",
		Long: `history lists the policy's revisions as kubectl rollout history does: REVISION and
CHANGE-CAUSE (the policy's kubernetes.io/change-cause annotation when the revision was made).
--revision N shows what revision N restores: module, module digest and settings.
-o json or yaml prints every revision (or revision N) with its data and which one serves.`,
		Example: `  tollgate rollout history cap/require-labels
  tollgate rollout history ap/require-labels -n shop --revision 2
  tollgate rollout history require-labels -o json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			c, p, err := f.policy(cmd, args)
			if err != nil {
				return err
			}
			revs, err := rollout.History(cmd.Context(), c, p)
			if err != nil {
				return err
			}
			if revision != 0 {
				var found *rollout.Revision
				for i := range revs {
					if revs[i].Number == revision {
						found = &revs[i]
					}
				}
				if found == nil {
					return fmt.Errorf("unable to find the specified revision %d in the history of %s", revision, rollout.Ref(p))
				}
				if output != "" {
					return printData(cmd.OutOrStdout(), output, found)
				}
				return printRevision(cmd.OutOrStdout(), rollout.Ref(p), *found)
			}
			if output != "" {
				if revs == nil {
					revs = []rollout.Revision{}
				}
				return printData(cmd.OutOrStdout(), output, revs)
			}
			w := cmd.OutOrStdout()
			if len(revs) == 0 {
				fmt.Fprintf(w, "No rollout history found for %s.\n", rollout.Ref(p))
				return nil
			}
			fmt.Fprintf(w, "%s \n", rollout.Ref(p))
			tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "REVISION\tCHANGE-CAUSE")
			for _, r := range revs {
				cause := r.ChangeCause
				if cause == "" {
					cause = "<none>"
				}
				fmt.Fprintf(tw, "%d\t%s\n", r.Number, cause)
			}
			fmt.Fprintln(tw)
			return tw.Flush()
		},
	}
	f.add(cmd.Flags())
	cmd.Flags().Int64Var(&revision, "revision", 0, "show the details of this revision")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: kubectl's table)")
	return cmd
}

// printRevision is `history --revision N`, in the shape of kubectl's "with revision #N".
func printRevision(w io.Writer, ref string, r rollout.Revision) error {
	fmt.Fprintf(w, "%s with revision #%d\n", ref, r.Number)
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	cause := r.ChangeCause
	if cause == "" {
		cause = "<none>"
	}
	fmt.Fprintf(tw, "ControllerRevision:\t%s/%s\n", r.Namespace, r.Name)
	fmt.Fprintf(tw, "Change cause:\t%s\n", cause)
	fmt.Fprintf(tw, "Serving:\t%s\n", strconv.FormatBool(r.Current))
	module := func(indent string, m v1.RevisionModule) {
		fmt.Fprintf(tw, "%sModule:\t%s\n", indent, m.Module)
		if m.ModuleDigest != "" {
			fmt.Fprintf(tw, "%sModule digest:\t%s\n", indent, m.ModuleDigest)
		}
		if m.ManifestDigest != "" {
			fmt.Fprintf(tw, "%sManifest digest:\t%s\n", indent, m.ManifestDigest)
		}
		s := string(m.Settings)
		if s == "" {
			s = "<none>"
		}
		fmt.Fprintf(tw, "%sSettings:\t%s\n", indent, s)
	}
	if r.Data.Policies == nil {
		module("", r.Data.RevisionModule)
	} else {
		if r.Data.Expression != "" {
			fmt.Fprintf(tw, "Expression:\t%s\n", r.Data.Expression)
		}
		fmt.Fprintln(tw, "Policies:\t")
		for _, n := range slices.Sorted(maps.Keys(r.Data.Policies)) {
			fmt.Fprintf(tw, "  %s:\t\n", n)
			module("    ", r.Data.Policies[n])
		}
	}
	return tw.Flush()
}

func newRolloutUndoCmd() *cobra.Command {
	f := &rolloutFlags{}
	var to int64
	cmd := &cobra.Command{
		Use:   "undo POLICY",
		Short: "Restore a previous revision's module and settings into the policy",
		Long: `undo writes a previous revision's module and settings back into the policy's spec (the
newest revision the spec does not hold, or --to-revision N), as kubectl rollout undo does. A
registry:// module is pinned to the manifest digest the policy server loaded
(registry://host/repository:tag@sha256:...), which the server keeps in its store: the
undo loads without asking the registry. The controller then serves it as usual, and the
restored revision becomes the newest (it is renumbered, not copied).`,
		Example: `  tollgate rollout undo cap/require-labels
  tollgate rollout undo ap/require-labels -n shop --to-revision 2`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to < 0 {
				return fmt.Errorf("--to-revision: %d: want 0 (the previous revision) or more", to)
			}
			c, p, err := f.policy(cmd, args)
			if err != nil {
				return err
			}
			r, skip, err := rollout.Undo(cmd.Context(), c, p, to)
			if err != nil {
				return err
			}
			if skip {
				fmt.Fprintf(cmd.OutOrStdout(), "%s skipped rollback (current template already matches revision %d)\n", rollout.Ref(p), r.Number)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s rolled back\n", rollout.Ref(p))
			return nil
		},
	}
	f.add(cmd.Flags())
	cmd.Flags().Int64Var(&to, "to-revision", 0, "the revision to roll back to (default 0: the previous revision)")
	return cmd
}
