package controller

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// shadowPollFactor: an active policy with a shadow is asked every shadowPollFactor
// StatusPollIntervals (2 s by default), so that status.shadow follows its divergences.
const shadowPollFactor = 4

// maxShadowRecent is how many diverging requests status.shadow keeps.
const maxShadowRecent = 5

// maxAnswer bounds an answer's text in status.shadow.recent.
const maxAnswer = 256

// hasShadow reports whether p's spec has a shadow.
func hasShadow(p v1.Policy) bool {
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicy:
		return p.Spec.Shadow != nil
	case *v1.AdmissionPolicy:
		return p.Spec.Shadow != nil
	case *v1.ClusterAdmissionPolicyGroup:
		return p.Spec.Shadow != nil
	case *v1.AdmissionPolicyGroup:
		return p.Spec.Shadow != nil
	}
	return false
}

// shadowStatus sums what the replicas that serve p (served) report about its shadow: nil
// without spec.shadow; failed when a replica failed to load it, loading while one has not
// (or does not report it), ready otherwise; counts added up; the newest divergences.
func shadowStatus(p v1.Policy, served []*status.Policy) *v1.ShadowStatus {
	if !hasShadow(p) {
		return nil
	}
	st := &v1.ShadowStatus{State: status.StateReady}
	var recent []v1.ShadowDivergence
	for _, pol := range served {
		sh := pol.Shadow
		switch {
		case sh == nil || sh.State == status.StateLoading:
			if st.State == status.StateReady {
				st.State = status.StateLoading
			}
			if sh == nil {
				continue
			}
		case sh.State == status.StateFailed:
			if st.State != status.StateFailed {
				st.State, st.Error = status.StateFailed, sh.Error
			}
		}
		st.Evaluations += sh.Evaluations
		st.Divergences = addCounts(st.Divergences, sh.Divergences)
		st.Dropped = addCounts(st.Dropped, sh.Dropped)
		for _, d := range sh.Recent {
			recent = append(recent, v1.ShadowDivergence{
				Time: metav1.NewTime(d.Time), UID: d.UID, Kind: d.Kind, Namespace: d.Namespace, Name: d.Name,
				Operation: d.Operation, Divergence: d.Divergence, Serving: answer(d.Serving), Shadow: answer(d.Candidate),
			})
		}
	}
	if len(served) == 0 {
		st.State = status.StateLoading
	}
	sort.SliceStable(recent, func(i, j int) bool { return recent[i].Time.After(recent[j].Time.Time) })
	if len(recent) > maxShadowRecent {
		recent = recent[:maxShadowRecent]
	}
	st.Recent = recent
	if len(st.Error) > maxConditionMessage {
		st.Error = strings.ToValidUTF8(st.Error[:maxConditionMessage-3], "") + "..."
	}
	return st
}

func addCounts(into, from map[string]int64) map[string]int64 {
	for _, k := range slices.Sorted(maps.Keys(from)) {
		if into == nil {
			into = map[string]int64{}
		}
		into[k] += from[k]
	}
	return into
}

// answer is one answer in brief: "allowed", "allowed with a patch of N operations",
// "denied (CODE): MESSAGE", "error: REASON".
func answer(a status.Answer) string {
	var s string
	switch {
	case a.Error != "":
		s = "error: " + a.Error
	case a.Allowed && a.PatchOps > 0:
		s = fmt.Sprintf("allowed with a patch of %d operation(s)", a.PatchOps)
	case a.Allowed:
		s = "allowed"
	default:
		s = "denied"
		if a.Code != 0 {
			s += fmt.Sprintf(" (%d)", a.Code)
		}
		if a.Message != "" {
			s += ": " + a.Message
		}
	}
	if len(s) > maxAnswer {
		s = strings.ToValidUTF8(s[:maxAnswer-3], "") + "..."
	}
	return s
}
