package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;create;update;delete

// Reasons of the revision Events.
const (
	// ReasonRevisionActive: the policy serves a new revision (Normal).
	ReasonRevisionActive = "RevisionActive"
	// ReasonRevisionFailed: the revision could not be recorded (Warning); the policy serves.
	ReasonRevisionFailed = "RevisionFailed"
)

// RevisionNamespace is where the ControllerRevisions of p live: its own namespace, or the
// controller's for a cluster-wide policy (a ControllerRevision is namespaced).
func RevisionNamespace(p v1.Policy, controllerNamespace string) string {
	if p.IsNamespaced() {
		return p.GetNamespace()
	}
	return controllerNamespace
}

// RevisionDataOf returns the revision p is at, with the module digests the server reports in
// served (nil: none known).
func RevisionDataOf(p v1.Policy, served *status.Policy) v1.RevisionData {
	module := func(m v1.ModuleSpec, digest, manifest string) v1.RevisionModule {
		rm := v1.RevisionModule{Module: m.Module, ModuleDigest: digest, ManifestDigest: manifest}
		if s := m.Settings.Raw; len(s) > 0 && string(s) != "null" {
			rm.Settings = canonicalJSON(s)
		}
		return rm
	}
	var d v1.RevisionData
	memberDigests := func(name string) (string, string) {
		if served == nil {
			return "", ""
		}
		for _, m := range served.Members {
			if m.Name == name {
				return m.Digest, m.ManifestDigest
			}
		}
		return "", ""
	}
	digest, manifest := "", ""
	if served != nil {
		digest, manifest = served.Digest, served.ManifestDigest
	}
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicy:
		d.RevisionModule = module(p.Spec.ModuleSpec, digest, manifest)
	case *v1.AdmissionPolicy:
		d.RevisionModule = module(p.Spec.ModuleSpec, digest, manifest)
	case *v1.ClusterAdmissionPolicyGroup:
		d.Policies, d.Expression = map[string]v1.RevisionModule{}, p.Spec.Expression
		for name, m := range p.Spec.Policies {
			dg, mf := memberDigests(name)
			d.Policies[name] = module(m.ModuleSpec, dg, mf)
		}
	case *v1.AdmissionPolicyGroup:
		d.Policies, d.Expression = map[string]v1.RevisionModule{}, p.Spec.Expression
		for name, m := range p.Spec.Policies {
			dg, mf := memberDigests(name)
			d.Policies[name] = module(m.ModuleSpec, dg, mf)
		}
	}
	return d
}

// canonicalJSON re-encodes b with sorted keys and numbers as written; b itself when it does
// not decode.
func canonicalJSON(b []byte) json.RawMessage {
	v, err := decodeJSON(b)
	if err != nil {
		return json.RawMessage(b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(b)
	}
	return out
}

// revisionIdentity is what makes two revisions the same: per module its digest (its URI when
// the digest is unknown) and its settings, and a group's expression. The URI is left out when
// the digest is known, so that a module pinned by `tollgate rollout undo` is the revision it
// came from.
func revisionIdentity(d v1.RevisionData) []byte {
	type id struct {
		Digest   string          `json:"d"`
		Settings json.RawMessage `json:"s,omitempty"`
	}
	of := func(m v1.RevisionModule) id {
		if m.ModuleDigest != "" {
			return id{Digest: m.ModuleDigest, Settings: m.Settings}
		}
		return id{Digest: "uri:" + m.Module, Settings: m.Settings}
	}
	var b []byte
	if d.Policies == nil {
		b, _ = json.Marshal(of(d.RevisionModule))
		return b
	}
	ids := map[string]id{}
	for n, m := range d.Policies {
		ids[n] = of(m)
	}
	if d.Expression == "" {
		b, _ = json.Marshal(ids) // sorted keys
		return b
	}
	b, _ = json.Marshal(struct {
		Expression string        `json:"e"`
		Members    map[string]id `json:"m"`
	}{d.Expression, ids})
	return b
}

// RevisionHash is the hash of a revision of the policy of uid: its ControllerRevision's name
// suffix and controller-revision-hash label.
func RevisionHash(uid types.UID, d v1.RevisionData) string {
	h := fnv.New32a()
	h.Write([]byte(uid))
	h.Write(revisionIdentity(d))
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// RevisionName is the name of the ControllerRevision of hash for the policy name:
// <name>-<hash>, the name cut to fit.
func RevisionName(name, hash string) string {
	if max := 253 - 1 - len(hash); len(name) > max {
		name = name[:max]
	}
	return name + "-" + hash
}

// ownedRevisions lists p's ControllerRevisions, oldest revision first.
func ownedRevisions(ctx context.Context, c client.Reader, p v1.Policy, ns string) ([]appsv1.ControllerRevision, error) {
	var list appsv1.ControllerRevisionList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1.RevisionPolicyUIDLabel: string(p.GetUID())}); err != nil {
		return nil, fmt.Errorf("listing the ControllerRevisions of %s %s: %w", p.PolicyKind(), policyRef(p.GetNamespace(), p.GetName()), err)
	}
	var out []appsv1.ControllerRevision
	for _, cr := range list.Items {
		if metav1.IsControlledBy(&cr, p) {
			out = append(out, cr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out, nil
}

// recordRevision makes the revision an active policy serves a ControllerRevision of the policy
// (or renumbers the one it has, as the newest), prunes the revisions beyond
// spec.revisionHistoryLimit and names it in status.revision, with a RevisionActive Event
// when it changed. Nothing is read or written while status.revision names it already.
func (r *policyReconciler) recordRevision(ctx context.Context, p v1.Policy, served *status.Policy) error {
	if served == nil || p.GetUID() == "" {
		return nil
	}
	data := RevisionDataOf(p, served)
	hash := RevisionHash(p.GetUID(), data)
	name := RevisionName(p.GetName(), hash)
	st := p.PolicyStatus()
	if st.Revision != nil && st.Revision.Name == name {
		return nil
	}
	ns := RevisionNamespace(p, r.o.Namespace)
	reader := r.revs
	if reader == nil {
		reader = r.Client
	}
	revs, err := ownedRevisions(ctx, reader, p, ns)
	if err != nil {
		return err
	}
	var latest int64
	var cur *appsv1.ControllerRevision
	for i := range revs {
		latest = max(latest, revs[i].Revision)
		if revs[i].Name == name {
			cur = &revs[i]
		}
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	cause, hasCause := p.GetAnnotations()[v1.ChangeCauseAnnotation]
	switch {
	case cur == nil:
		cr := &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: ns,
				Labels: map[string]string{
					v1.RevisionPolicyUIDLabel: string(p.GetUID()), v1.RevisionPolicyKindLabel: p.PolicyKind(),
					v1.RevisionHashLabel: hash, v1.LabelPartOf: v1.PartOfLabelValue,
				},
				Annotations: map[string]string{v1.PolicyNameAnnotation: p.GetName()},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: v1.GroupVersion.String(), Kind: p.PolicyKind(), Name: p.GetName(), UID: p.GetUID(),
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
				}},
			},
			Data:     runtime.RawExtension{Raw: raw},
			Revision: latest + 1,
		}
		if p.IsNamespaced() {
			cr.Annotations[v1.PolicyNamespaceAnnotation] = p.GetNamespace()
		}
		if hasCause {
			cr.Annotations[v1.ChangeCauseAnnotation] = cause
		}
		if err := r.Create(ctx, cr); err != nil {
			return fmt.Errorf("creating ControllerRevision %s/%s: %w", ns, name, err)
		}
		revs = append(revs, *cr)
		cur = &revs[len(revs)-1]
	case cur.Revision < latest:
		// An older revision serves again (an undo): it becomes the newest, as a StatefulSet's
		// does, with the cause of the change. Its data stays: a ControllerRevision's data is
		// immutable, and the identity (digests and settings) is the same.
		cur.Revision = latest + 1
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		if hasCause {
			cur.Annotations[v1.ChangeCauseAnnotation] = cause
		}
		if err := r.Update(ctx, cur); err != nil {
			return fmt.Errorf("renumbering ControllerRevision %s/%s: %w", ns, name, err)
		}
	}
	if err := r.pruneRevisions(ctx, p, revs, name); err != nil {
		return err
	}
	st.Revision = &v1.RevisionStatus{Name: name, Number: cur.Revision, ModuleDigest: data.ModuleDigest, ActiveSince: metav1.Now()}
	r.events.Event(p, corev1.EventTypeNormal, ReasonRevisionActive, revisionMessage(cur.Revision, name, data))
	return nil
}

// revisionMessage is the RevisionActive Event's message.
func revisionMessage(number int64, name string, d v1.RevisionData) string {
	msg := fmt.Sprintf("revision %d (ControllerRevision %s) is active", number, name)
	if d.Policies == nil {
		if d.ModuleDigest != "" {
			msg += ": module " + d.ModuleDigest
		}
		return msg
	}
	var ms []string
	for _, n := range slices.Sorted(maps.Keys(d.Policies)) {
		if dg := d.Policies[n].ModuleDigest; dg != "" {
			ms = append(ms, n+" "+dg)
		}
	}
	if len(ms) > 0 {
		msg += fmt.Sprintf(": members %v", ms)
	}
	return msg
}

// pruneRevisions deletes the oldest of p's revisions (revs, oldest first) but the serving one
// (current) beyond spec.revisionHistoryLimit.
func (r *policyReconciler) pruneRevisions(ctx context.Context, p v1.Policy, revs []appsv1.ControllerRevision, current string) error {
	var old []*appsv1.ControllerRevision
	for i := range revs {
		if revs[i].Name != current {
			old = append(old, &revs[i])
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].Revision < old[j].Revision })
	for len(old) > p.Revisions().HistoryLimit() {
		cr := old[0]
		old = old[1:]
		var opts []client.DeleteOption
		if cr.UID != "" {
			opts = append(opts, client.Preconditions{UID: &cr.UID})
		}
		err := r.Delete(ctx, cr, opts...)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting ControllerRevision %s/%s: %w", cr.Namespace, cr.Name, err)
		}
	}
	return nil
}
