package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// ErrNotFound: no policy of that name, or no such revision.
var ErrNotFound = errors.New("not found")

// NewClient returns a client for policies and ControllerRevisions.
func NewClient(cfg *rest.Config) (client.Client, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1.AddToScheme(s); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

// kinds are the policy kinds with the names a user may type for them.
var kinds = []struct {
	kind, resource, short string
	namespaced            bool
	newObj                func() v1.Policy
}{
	{"ClusterAdmissionPolicy", "clusteradmissionpolicies", "cap", false, func() v1.Policy { return &v1.ClusterAdmissionPolicy{} }},
	{"AdmissionPolicy", "admissionpolicies", "ap", true, func() v1.Policy { return &v1.AdmissionPolicy{} }},
	{"ClusterAdmissionPolicyGroup", "clusteradmissionpolicygroups", "capg", false, func() v1.Policy { return &v1.ClusterAdmissionPolicyGroup{} }},
	{"AdmissionPolicyGroup", "admissionpolicygroups", "apg", true, func() v1.Policy { return &v1.AdmissionPolicyGroup{} }},
}

// Ref is how kubectl names an object: "clusteradmissionpolicy.policies.tollgate.dev/NAME".
func Ref(p v1.Policy) string {
	return strings.ToLower(p.PolicyKind()) + "." + v1.GroupVersion.Group + "/" + p.GetName()
}

// Get finds the policy that args name: "KIND/NAME", "KIND NAME" (KIND a kind, its plural or
// short name, optionally with .policies.tollgate.dev) or a bare NAME, which must name exactly one
// policy (the namespaced kinds are looked for in namespace, when it is given).
func Get(ctx context.Context, c client.Reader, args []string, namespace string) (v1.Policy, error) {
	var kind, name string
	switch {
	case len(args) == 1 && strings.Contains(args[0], "/"):
		kind, name, _ = strings.Cut(args[0], "/")
	case len(args) == 1:
		name = args[0]
	case len(args) == 2:
		kind, name = args[0], args[1]
	default:
		return nil, fmt.Errorf("want POLICY, KIND/NAME or KIND NAME, got %d arguments", len(args))
	}
	if name == "" {
		return nil, errors.New("empty policy name")
	}
	var found []v1.Policy
	matched := false
	for _, k := range kinds {
		if kind != "" && !kindMatches(kind, k.kind, k.resource, k.short) {
			continue
		}
		matched = true
		if k.namespaced && namespace == "" {
			if kind != "" {
				return nil, fmt.Errorf("%s %q: an %s is namespaced: give --namespace", kind, name, k.kind)
			}
			continue
		}
		p := k.newObj()
		key := types.NamespacedName{Name: name}
		if k.namespaced {
			key.Namespace = namespace
		}
		err := c.Get(ctx, key, p)
		switch {
		case err == nil:
			found = append(found, p)
		case apierrors.IsNotFound(err):
		default:
			return nil, fmt.Errorf("getting %s %s: %w", k.kind, key, err)
		}
	}
	if !matched {
		return nil, fmt.Errorf("unknown kind %q: want clusteradmissionpolicy (cap), admissionpolicy (ap), clusteradmissionpolicygroup (capg) or admissionpolicygroup (apg)", kind)
	}
	switch len(found) {
	case 0:
		where := ""
		if namespace != "" {
			where = " (namespaced kinds in namespace " + namespace + ")"
		}
		return nil, fmt.Errorf("%w: no policy named %q%s", ErrNotFound, name, where)
	case 1:
		return found[0], nil
	}
	var refs []string
	for _, p := range found {
		refs = append(refs, Ref(p))
	}
	return nil, fmt.Errorf("%q names %d policies (%s): name one as KIND/NAME", name, len(found), strings.Join(refs, ", "))
}

func kindMatches(typed, kind, resource, short string) bool {
	t := strings.ToLower(strings.TrimSuffix(typed, "."+v1.GroupVersion.Group))
	return t == strings.ToLower(kind) || t == resource || t == short
}

// Revision is one revision of a policy.
type Revision struct {
	// Number is the revision number.
	Number int64 `json:"revision"`
	// Name and Namespace of the ControllerRevision.
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// ChangeCause is the kubernetes.io/change-cause the policy had when the revision was made.
	ChangeCause string `json:"changeCause,omitempty"`
	// Created is when the ControllerRevision was made.
	Created time.Time `json:"created"`
	// Current: the policy serves this revision (status.revision).
	Current bool `json:"current,omitempty"`
	// Data is what the revision restores: module, digests and settings.
	Data v1.RevisionData `json:"data"`
}

// History returns p's revisions, oldest first.
func History(ctx context.Context, c client.Reader, p v1.Policy) ([]Revision, error) {
	var list appsv1.ControllerRevisionList
	if err := c.List(ctx, &list, client.MatchingLabels{v1.RevisionPolicyUIDLabel: string(p.GetUID())}); err != nil {
		return nil, fmt.Errorf("listing the ControllerRevisions of %s: %w", Ref(p), err)
	}
	current := ""
	if st := p.PolicyStatus().Revision; st != nil {
		current = st.Name
	}
	var out []Revision
	for i := range list.Items {
		cr := &list.Items[i]
		if !metav1.IsControlledBy(cr, p) {
			continue
		}
		r := Revision{Number: cr.Revision, Name: cr.Name, Namespace: cr.Namespace, ChangeCause: cr.Annotations[v1.ChangeCauseAnnotation],
			Created: cr.CreationTimestamp.Time, Current: cr.Name == current}
		if err := json.Unmarshal(cr.Data.Raw, &r.Data); err != nil {
			return nil, fmt.Errorf("ControllerRevision %s/%s: data: %w", cr.Namespace, cr.Name, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// Target picks the revision an undo restores: number to, or (0) the newest revision that is not
// what the spec holds now: the revision before the one the spec was set to, as kubectl's
// "previous revision", also when the controller has not recorded the spec's revision yet (an
// undo right after another). skip is true when the spec already holds revision to.
func Target(p v1.Policy, revs []Revision, to int64) (target Revision, skip bool, err error) {
	if len(revs) == 0 {
		return Revision{}, false, fmt.Errorf("%w: no rollout history found for %s", ErrNotFound, Ref(p))
	}
	if to == 0 {
		for i := len(revs) - 1; i >= 0; i-- {
			if !SpecHolds(p, revs[i].Data) {
				return revs[i], false, nil
			}
		}
		return Revision{}, false, fmt.Errorf("%w: every revision of %s is what its spec holds: nothing to roll back to", ErrNotFound, Ref(p))
	}
	for _, r := range revs {
		if r.Number == to {
			return r, SpecHolds(p, r.Data), nil
		}
	}
	return Revision{}, false, fmt.Errorf("%w: unable to find the specified revision %d in the history of %s", ErrNotFound, to, Ref(p))
}

// SpecHolds reports whether p's spec holds revision d: the same module (as recorded, or pinned
// as an undo writes it) and the same settings, for the policy or each member of a group, and a
// group's expression (when the revision has one).
func SpecHolds(p v1.Policy, d v1.RevisionData) bool {
	holds := func(m v1.ModuleSpec, r v1.RevisionModule) bool {
		if m.Module != r.Module && m.Module != PinnedModule(r) {
			return false
		}
		return sameJSON(m.Settings.Raw, r.Settings)
	}
	members := func(spec map[string]v1.ModuleSpec, expression string) bool {
		if len(spec) != len(d.Policies) || (d.Expression != "" && d.Expression != expression) {
			return false
		}
		for n, m := range spec {
			r, ok := d.Policies[n]
			if !ok || !holds(m, r) {
				return false
			}
		}
		return true
	}
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicy:
		return d.Policies == nil && holds(p.Spec.ModuleSpec, d.RevisionModule)
	case *v1.AdmissionPolicy:
		return d.Policies == nil && holds(p.Spec.ModuleSpec, d.RevisionModule)
	case *v1.ClusterAdmissionPolicyGroup:
		spec := map[string]v1.ModuleSpec{}
		for n, m := range p.Spec.Policies {
			spec[n] = m.ModuleSpec
		}
		return members(spec, p.Spec.Expression)
	case *v1.AdmissionPolicyGroup:
		spec := map[string]v1.ModuleSpec{}
		for n, m := range p.Spec.Policies {
			spec[n] = m.ModuleSpec
		}
		return members(spec, p.Spec.Expression)
	}
	return false
}

// sameJSON compares two settings as JSON values; absent and null are the same.
func sameJSON(a, b []byte) bool {
	decode := func(x []byte) (any, bool) {
		x = bytes.TrimSpace(x)
		if len(x) == 0 || string(x) == "null" {
			return nil, true
		}
		dec := json.NewDecoder(bytes.NewReader(x))
		dec.UseNumber()
		var v any
		return v, dec.Decode(&v) == nil
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	return okA && okB && reflect.DeepEqual(va, vb)
}

// PinnedModule is the module URI an undo writes: a registry:// module pinned to the manifest
// digest the server loaded (the tag kept for people), so that the policy server takes it from
// its store without asking the registry; other URIs as they were.
func PinnedModule(m v1.RevisionModule) string {
	if m.ManifestDigest == "" || !strings.HasPrefix(m.Module, "registry://") {
		return m.Module
	}
	name, _, _ := strings.Cut(m.Module, "@")
	return name + "@" + m.ManifestDigest
}

// UndoPatch is the merge patch that restores r into p: module (pinned, see PinnedModule) and
// settings of a policy, or of each member of a group (members the revision does not have are
// removed) and the group's expression, and the revision's change cause.
func UndoPatch(p v1.Policy, r Revision) ([]byte, error) {
	module := func(m v1.RevisionModule) map[string]any {
		out := map[string]any{"module": PinnedModule(m), "settings": nil}
		if len(m.Settings) > 0 {
			out["settings"] = m.Settings
		}
		return out
	}
	spec := map[string]any{}
	if p.IsGroup() {
		if r.Data.Policies == nil {
			return nil, fmt.Errorf("revision %d of %s holds a single policy, not a group's members", r.Number, Ref(p))
		}
		members := map[string]any{}
		for _, n := range slices.Sorted(maps.Keys(r.Data.Policies)) {
			members[n] = module(r.Data.Policies[n])
		}
		for _, n := range groupMembers(p) {
			if _, ok := r.Data.Policies[n]; !ok {
				members[n] = nil
			}
		}
		spec["policies"] = members
		if r.Data.Expression != "" {
			spec["expression"] = r.Data.Expression
		}
	} else {
		if r.Data.Module == "" {
			return nil, fmt.Errorf("revision %d of %s holds no module", r.Number, Ref(p))
		}
		spec = module(r.Data.RevisionModule)
	}
	var cause any
	if r.ChangeCause != "" {
		cause = r.ChangeCause
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{v1.ChangeCauseAnnotation: cause}},
		"spec":     spec,
	})
}

func groupMembers(p v1.Policy) []string {
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicyGroup:
		return slices.Sorted(maps.Keys(p.Spec.Policies))
	case *v1.AdmissionPolicyGroup:
		return slices.Sorted(maps.Keys(p.Spec.Policies))
	}
	return nil
}

// Undo restores revision to (0: the previous one) into p's spec. It returns the revision, and
// skip when p serves it already (nothing is written then).
func Undo(ctx context.Context, c client.Client, p v1.Policy, to int64) (Revision, bool, error) {
	revs, err := History(ctx, c, p)
	if err != nil {
		return Revision{}, false, err
	}
	r, skip, err := Target(p, revs, to)
	if err != nil || skip {
		return r, skip, err
	}
	patch, err := UndoPatch(p, r)
	if err != nil {
		return r, false, err
	}
	// The patch applies to the version the history was read from, so a concurrent edit of the
	// spec fails it. A write that left the spec as it was (the controller's status, a label)
	// also moves the resourceVersion: then the policy is read again and the same patch retried.
	read := p
	for attempt := 1; ; attempt++ {
		withRV, err := withResourceVersion(patch, p.GetResourceVersion())
		if err != nil {
			return r, false, err
		}
		err = c.Patch(ctx, p, client.RawPatch(types.MergePatchType, withRV))
		if err == nil {
			return r, false, nil
		}
		if !apierrors.IsConflict(err) || attempt == undoAttempts {
			return r, false, fmt.Errorf("restoring revision %d into %s: %w", r.Number, Ref(p), err)
		}
		fresh := read.DeepCopyObject().(v1.Policy)
		if gerr := c.Get(ctx, client.ObjectKeyFromObject(read), fresh); gerr != nil {
			return r, false, fmt.Errorf("restoring revision %d into %s: %w (reading it again: %v)", r.Number, Ref(p), err, gerr)
		}
		same, serr := sameSpec(read, fresh)
		if serr != nil {
			return r, false, fmt.Errorf("restoring revision %d into %s: %w", r.Number, Ref(p), serr)
		}
		if !same {
			return r, false, fmt.Errorf("restoring revision %d into %s: its spec changed since it was read (resourceVersion %s, now %s): run the undo again to decide on the new history",
				r.Number, Ref(p), read.GetResourceVersion(), fresh.GetResourceVersion())
		}
		p = fresh
	}
}

// undoAttempts bounds Undo's re-reads after writes that left the spec alone.
const undoAttempts = 5

// sameSpec says whether a and b hold the same spec (JSON-equal).
func sameSpec(a, b v1.Policy) (bool, error) {
	spec := func(o v1.Policy) ([]byte, error) {
		raw, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		var m struct {
			Spec json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		return m.Spec, nil
	}
	sa, err := spec(a)
	if err != nil {
		return false, err
	}
	sb, err := spec(b)
	if err != nil {
		return false, err
	}
	return sameJSON(sa, sb), nil
}

func withResourceVersion(patch []byte, rv string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	m["metadata"].(map[string]any)["resourceVersion"] = rv
	return json.Marshal(m)
}
