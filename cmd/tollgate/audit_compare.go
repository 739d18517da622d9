package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"k8s.io/client-go/rest"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/crds/audit"
	"github.com/tollgate-dev/tollgate/crds/rollout"
	"github.com/tollgate-dev/tollgate/host/admission"
)

// activePolicy loads the cluster's policy of candidate's kind and name (its spec.module and
// spec.settings), for `audit --compare`.
func activePolicy(ctx context.Context, cfg *rest.Config, candidate *audit.Policy, rt *runtimeFlags, log *slog.Logger) (*localEvaluator, error) {
	c, err := rollout.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	obj := candidate.Object
	p, err := rollout.Get(ctx, c, []string{obj.PolicyKind() + "/" + obj.GetName()}, obj.GetNamespace())
	if err != nil {
		return nil, fmt.Errorf("--compare: the policy to compare with: %w", err)
	}
	var m v1.ModuleSpec
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicy:
		m = p.Spec.ModuleSpec
	case *v1.AdmissionPolicy:
		m = p.Spec.ModuleSpec
	}
	module := m.Module
	if !strings.Contains(module, "://") {
		module = "registry://" + module // Kubewarden's default scheme, as the controller writes it
	}
	var settings []byte
	if s := bytes.TrimSpace(m.Settings.Raw); len(s) > 0 && string(s) != "null" {
		settings = s
	}
	return loadLocal(ctx, "--compare: "+rollout.Ref(p)+" in the cluster", module, settings, rt, log)
}

// objectChange is an object whose answer would change with the candidate.
type objectChange struct {
	Object audit.ObjectRef `json:"object"`
	// Change is error (one of the two failed), verdict (allowed by one, denied by the other)
	// or patch (both allowed, different patches).
	Change    string `json:"change"`
	Active    string `json:"active"`
	Candidate string `json:"candidate"`
	// ActivePatch and CandidatePatch are the JSONPatches of a patch change.
	ActivePatch    json.RawMessage `json:"activePatch,omitempty"`
	CandidatePatch json.RawMessage `json:"candidatePatch,omitempty"`
}

// compareEvaluator runs the candidate and the active policy on each object and keeps the
// objects whose verdict or patch differ. To the audit, an object that would change fails and
// one that would not passes.
type compareEvaluator struct {
	candidate, active *localEvaluator

	mu      sync.Mutex
	changes []objectChange
}

func (e *compareEvaluator) Evaluate(ctx context.Context, _ *audit.Policy, review []byte) audit.Verdict {
	req, err := admission.ParseReview(review)
	if err != nil {
		return audit.Verdict{Outcome: audit.Error, Message: err.Error()}
	}
	va, errA := e.active.verdict(ctx, req)
	vc, errC := e.candidate.verdict(ctx, req)
	ch := objectChange{Active: answerText(va, errA), Candidate: answerText(vc, errC)}
	switch {
	case (errA == nil) != (errC == nil):
		ch.Change = "error"
	case errA != nil:
		return audit.Verdict{Outcome: audit.Pass} // both failed: no change to report
	case va.Accepted != vc.Accepted:
		ch.Change = "verdict"
	case va.Accepted && !samePatch(va.Patch, vc.Patch):
		ch.Change = "patch"
		ch.ActivePatch, ch.CandidatePatch = rawPatch(va.Patch), rawPatch(vc.Patch)
	default:
		return audit.Verdict{Outcome: audit.Pass}
	}
	ch.Object = audit.ObjectRef{APIVersion: apiVersion(req.Kind), Kind: req.Kind.Kind, Namespace: req.Namespace, Name: req.Name}
	e.mu.Lock()
	e.changes = append(e.changes, ch)
	e.mu.Unlock()
	return audit.Verdict{Outcome: audit.Fail, Message: fmt.Sprintf("%s: active %s, candidate %s", ch.Change, ch.Active, ch.Candidate)}
}

func apiVersion(k admission.GroupVersionKind) string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// answerText is an answer in brief: allowed, allowed with a patch, denied: MESSAGE, error: ...
func answerText(v admission.Verdict, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case v.Accepted && len(v.Patch) > 0:
		return "allowed with a patch"
	case v.Accepted:
		return "allowed"
	case v.Message != "":
		return "denied: " + v.Message
	}
	return "denied"
}

// samePatch compares two JSONPatches as JSON values (a patch written otherwise is the same).
func samePatch(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func rawPatch(p []byte) json.RawMessage {
	if len(p) == 0 || !json.Valid(p) {
		return nil
	}
	return json.RawMessage(p)
}

// print writes the changes sorted by namespace, kind and name: a table (format "" or table),
// json or yaml.
func (e *compareEvaluator) print(w io.Writer, format string) error {
	e.mu.Lock()
	changes := append([]objectChange{}, e.changes...)
	e.mu.Unlock()
	sort.Slice(changes, func(i, j int) bool {
		a, b := changes[i].Object, changes[j].Object
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	if format == "json" || format == "yaml" {
		return printData(w, format, changes)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tKIND\tNAME\tCHANGE\tACTIVE\tCANDIDATE")
	for _, c := range changes {
		ns := c.Object.Namespace
		if ns == "" {
			ns = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ns, c.Object.Kind, c.Object.Name, c.Change, oneLine(c.Active), oneLine(c.Candidate))
	}
	return tw.Flush()
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
