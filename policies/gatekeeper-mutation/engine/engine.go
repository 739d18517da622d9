package engine

import (
	"errors"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/match"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/mutators"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/parser"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/schema"
)

// ErrNotConverging: the mutators kept changing the object.
var ErrNotConverging = errors.New("mutation not converging")

// ErrRequest wraps the errors of Mutate that come from the request itself
// (an object that is not JSON or has no kind).
var ErrRequest = errors.New("invalid request")

// GVK is a group, version and kind.
type GVK struct{ Group, Version, Kind string }

// Request is one admission request, as Gatekeeper's webhook sees it.
type Request struct {
	Operation string
	Kind      GVK
	Name      string
	Namespace string
	Username  string
	Object    []byte
	OldObject []byte
	// Cluster reads the request's Namespace object when the settings say
	// fromCluster (the guest asks the host's kubernetes/get_resource).
	Cluster NamespaceGetter
	// Parsed, when set, is Object already parsed (jsonv.IntsPreserved), for
	// a caller that parsed it while reading the request; Mutate changes it.
	Parsed *jsonv.Value
	// Out, when not nil, is where Mutate appends the mutated object's
	// encoding (the guest passes its answer's buffer, its prefix written,
	// reused from call to call), instead of a buffer of its own.
	Out []byte
	// Scratch, when not nil, holds the buffers of the convergence loop's
	// encodings, kept for the next Mutate that gets it.
	Scratch *Scratch
}

// Scratch is memory Mutate reuses from one call to the next: the buffers
// of the convergence loop's encodings of the object (under TinyGo every
// allocation is collector work). A caller that answers one request at a
// time (the guest) keeps one; a Scratch must not serve two Mutates at once.
type Scratch struct {
	bufs [3][]byte
}

// buf is buffer i, empty, with room for n bytes.
func (sc *Scratch) buf(i, n int) []byte {
	if sc == nil {
		return make([]byte, 0, n)
	}
	if cap(sc.bufs[i]) < n {
		sc.bufs[i] = make([]byte, 0, n)
	}
	return sc.bufs[i][:0]
}

// NamespaceGetter returns the JSON of the Namespace object named name as
// the cluster holds it; found is false when no such namespace exists, err
// is set when the cluster could not be asked.
type NamespaceGetter func(name string) (object []byte, found bool, err error)

// ErrCluster wraps the errors of reading the request's namespace from the
// cluster (fromCluster settings): a failed read, an answer that is not a
// Namespace, a namespace that does not exist.
var ErrCluster = errors.New("cannot read the request's namespace from the cluster")

// System is a compiled set of mutators with the namespaces they may select.
type System struct {
	muts       []*mutators.Mutator // sorted by kind, then name
	conflicts  map[int]bool
	namespaces map[string]*match.Namespace
	// fromCluster: namespaces come from Request.Cluster, not the settings.
	fromCluster bool
	// disjoint: no two enabled mutators can write at the same place or
	// one inside the other (disjointLocations), so the writes of one
	// iteration never undo each other and the mutators' change tracking
	// says exactly whether an iteration changed the object.
	disjoint bool
}

// FromCluster reports whether the settings take namespaces from the cluster.
func (s *System) FromCluster() bool { return s.fromCluster }

// GatekeeperServiceAccount is the user whose requests Gatekeeper never mutates.
const GatekeeperServiceAccount = "system:serviceaccount:gatekeeper-system:gatekeeper-admin"

var gatekeeperGroups = map[string]bool{
	"templates.gatekeeper.sh":    true,
	"constraints.gatekeeper.sh":  true,
	"mutations.gatekeeper.sh":    true,
	"config.gatekeeper.sh":       true,
	"externaldata.gatekeeper.sh": true,
	"expansion.gatekeeper.sh":    true,
	"status.gatekeeper.sh":       true,
}

// Compile decodes and validates settings (see the package documentation).
func Compile(settings []byte) (*System, error) {
	root, err := jsonv.Parse(settings, jsonv.IntsPreserved)
	if err != nil {
		return nil, &settingsError{msg: ErrSettings.Error() + ": " + err.Error(), inner: err}
	}
	if root.K == jsonv.Null {
		root = jsonv.NewObject()
	}
	if root.K != jsonv.Object {
		return nil, settingsErr("settings must be an object {\"mutators\": [...], \"namespaces\": [...]}")
	}
	for _, k := range root.O.Keys {
		if k != "mutators" && k != "namespaces" && k != "fromCluster" {
			return nil, settingsErr("unknown field " + k + " (want mutators, namespaces and fromCluster)")
		}
	}
	s := &System{namespaces: map[string]*match.Namespace{}}
	if fc := root.Field("fromCluster"); fc != nil && fc.K != jsonv.Null {
		if fc.K != jsonv.Bool {
			return nil, settingsErr("fromCluster: must be true or false, got " + typeName(fc))
		}
		s.fromCluster = fc.B
		if nss := root.Field("namespaces"); s.fromCluster && nss != nil && nss.K == jsonv.Array && len(nss.A) > 0 {
			return nil, settingsErr("namespaces: fromCluster takes the namespaces from the cluster; remove namespaces or set fromCluster: false")
		}
	}
	seen := map[string]int{}
	if ms := root.Field("mutators"); ms != nil && ms.K != jsonv.Null {
		if ms.K != jsonv.Array {
			return nil, settingsErr("mutators must be a list of Gatekeeper mutator objects")
		}
		for i, mv := range ms.A {
			spec, err := decodeMutator(i, mv)
			if err != nil {
				return nil, err
			}
			where := "mutators[" + itoa(i) + "] (" + spec.Kind + "/" + spec.Name + ")"
			if j, dup := seen[spec.Kind+"/"+spec.Name]; dup {
				return nil, settingsErr(where + ": metadata.name: Duplicate value: mutators[" + itoa(j) + "] is the same " + spec.Kind)
			}
			seen[spec.Kind+"/"+spec.Name] = i
			m, err := mutators.New(spec)
			if err != nil {
				return nil, &settingsError{msg: ErrSettings.Error() + ": " + where + ": " + err.Error(), inner: err}
			}
			s.muts = append(s.muts, m)
		}
	}
	if nss := root.Field("namespaces"); nss != nil && nss.K != jsonv.Null {
		if nss.K != jsonv.Array {
			return nil, settingsErr("namespaces must be a list of Namespace objects")
		}
		for i, nv := range nss.A {
			ns, err := decodeNamespace(i, nv)
			if err != nil {
				return nil, err
			}
			if _, dup := s.namespaces[ns.Name]; dup {
				return nil, settingsErr("namespaces[" + itoa(i) + "]: metadata.name: Duplicate value: " + ns.Name)
			}
			s.namespaces[ns.Name] = ns
		}
	}
	sort.SliceStable(s.muts, func(i, j int) bool {
		if s.muts[i].Kind != s.muts[j].Kind {
			return s.muts[i].Kind < s.muts[j].Kind
		}
		return s.muts[i].Name < s.muts[j].Name
	})
	s.conflicts = schema.Conflicting(s.muts)
	s.disjoint = s.disjointLocations()
	return s, nil
}

// disjointLocations reports whether no two enabled mutators' locations
// may reach the same value or one a value inside the other's: then, in one
// iteration, a write that changed the object is never undone by another
// (a mutator's own writes are at different keys or elements, and any
// other writes on its way put back what they found). Two locations are
// disjoint when, at some depth before either ends, they name different
// keys of an object, or one names a key and the other a list element, or
// both select a list's elements by the same key field with different
// values; a glob, or different key fields, may select the same element.
func (s *System) disjointLocations() bool {
	for i, a := range s.muts {
		if s.conflicts[i] {
			continue
		}
		for j := i + 1; j < len(s.muts); j++ {
			if !s.conflicts[j] && !disjointPaths(a.Path, s.muts[j].Path) {
				return false
			}
		}
	}
	return true
}

func disjointPaths(a, b parser.Path) bool {
	for d := 0; d < len(a.Nodes) && d < len(b.Nodes); d++ {
		x, y := a.Nodes[d], b.Nodes[d]
		switch {
		case x.Type != y.Type:
			return true
		case x.Type == parser.ObjectNode:
			if x.Reference != y.Reference {
				return true
			}
		case !x.Glob && !y.Glob && x.KeyField == y.KeyField &&
			(x.IntKey != y.IntKey || x.KeyInt != y.KeyInt || x.KeyString != y.KeyString):
			return true
		}
	}
	return false
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}

// IDs lists the mutators as "Kind/name" in application order.
func (s *System) IDs() []string {
	out := make([]string, len(s.muts))
	for i, m := range s.muts {
		out[i] = m.ID()
	}
	return out
}

// Conflicting lists the mutators disabled by schema conflicts, "Kind/name".
func (s *System) Conflicting() []string {
	var out []string
	for i, m := range s.muts {
		if s.conflicts[i] {
			out = append(out, m.ID())
		}
	}
	return out
}

// object accessors, as k8s.io/apimachinery's Unstructured reads them
// (v0.36: GetLabels coerces null values to "").

func nestedString(obj *jsonv.Value, keys ...string) string {
	v := obj
	for _, k := range keys {
		v = v.Field(k)
	}
	s, _ := v.Str()
	return s
}

func stringMap(obj *jsonv.Value, keys ...string) map[string]string {
	v := obj
	for _, k := range keys {
		v = v.Field(k)
	}
	if v == nil || v.K != jsonv.Object {
		return nil
	}
	m := make(map[string]string, len(v.O.Keys))
	for i, k := range v.O.Keys {
		// NestedNullCoercingStringMap (what GetLabels reads with): a null
		// value is "", any other non-string voids the map.
		switch e := v.O.At(i); e.K {
		case jsonv.String:
			m[k] = e.S
		case jsonv.Null:
			m[k] = ""
		default:
			return nil
		}
	}
	return m
}

func objectGVK(obj *jsonv.Value) match.GVK {
	av := nestedString(obj, "apiVersion")
	kind := nestedString(obj, "kind")
	switch strings.Count(av, "/") {
	case 0:
		return match.GVK{Version: av, Kind: kind}
	case 1:
		g, v, _ := strings.Cut(av, "/")
		if av == "/" {
			return match.GVK{Kind: kind}
		}
		return match.GVK{Group: g, Version: v, Kind: kind}
	}
	return match.GVK{}
}

// setNamespace mirrors Unstructured.SetNamespace.
func setNamespace(obj *jsonv.Value, ns string) {
	md, ok := obj.O.Get("metadata")
	if ns == "" {
		if ok && md.K == jsonv.Object {
			md.O.Delete("namespace")
		}
		return
	}
	if !ok {
		md = jsonv.NewObject()
		obj.O.Set("metadata", md)
	}
	if md.K == jsonv.Object {
		md.O.Set("namespace", jsonv.NewString(ns))
	}
}

func matchObject(obj *jsonv.Value) *match.Object {
	return &match.Object{
		GVK:          objectGVK(obj),
		Name:         nestedString(obj, "metadata", "name"),
		GenerateName: nestedString(obj, "metadata", "generateName"),
		Namespace:    nestedString(obj, "metadata", "namespace"),
		LoadLabels:   func() map[string]string { return stringMap(obj, "metadata", "labels") },
	}
}

func describe(mo *match.Object) string {
	name := mo.Name
	if name == "" {
		name = mo.GenerateName
	}
	return mo.GVK.Group + " " + mo.GVK.Kind + " " + mo.Namespace + " " + name
}

// Mutate applies the system to req (see the package documentation).
func (s *System) Mutate(req Request) ([]byte, bool, error) {
	if req.Username == GatekeeperServiceAccount || !match.SupportedOperation(req.Operation) || gatekeeperGroups[req.Kind.Group] {
		return nil, false, nil
	}
	if len(s.muts) == 0 && !s.fromCluster {
		return nil, false, nil
	}
	// The webhook reads the request's namespace before anything else
	// (pkg/webhook/mutation.go mutateRequest): from the cluster, a failed
	// read or a namespace that does not exist fails the request whatever the
	// mutators.
	var clusterNS *match.Namespace
	if s.fromCluster && req.Namespace != "" && !(req.Kind.Kind == "Namespace" && req.Kind.Group == "") {
		var err error
		if clusterNS, err = s.clusterNamespace(req); err != nil {
			return nil, false, err
		}
	}
	if len(s.muts) == 0 {
		return nil, false, nil
	}
	obj, err := req.Parsed, error(nil)
	if obj == nil {
		obj, err = jsonv.ParseLazy(req.Object, jsonv.IntsPreserved)
	}
	if err != nil {
		return nil, false, errors.Join(ErrRequest, err)
	}
	if obj.K != jsonv.Object {
		return nil, false, errors.Join(ErrRequest, errors.New("json: cannot unmarshal "+typeName(obj)+" into Go value of type map[string]interface {}"))
	}
	if objectGVK(obj).Kind == "" {
		return nil, false, errors.Join(ErrRequest, errors.New("Object 'Kind' is missing in '"+string(req.Object)+"'"))
	}
	reqNS := req.Namespace
	var ns *match.Namespace
	switch {
	case req.Kind.Kind == "Namespace" && req.Kind.Group == "":
		reqNS = ""
		if ns, err = namespaceOf(obj); err != nil {
			return nil, false, errors.Join(ErrRequest, err)
		}
	case clusterNS != nil:
		ns = clusterNS
	case reqNS != "":
		if n, ok := s.namespaces[reqNS]; ok {
			ns = n
		} else {
			ns = &match.Namespace{Name: reqNS}
		}
	}
	oldNS := nestedString(obj, "metadata", "namespace")
	// "Changed" compares the final object with the original as JSON values:
	// a mutation that only changes a number's type (1 -> 1.0) or moves a
	// key is no change for the patch. When setting the request namespace
	// for the mutation (and restoring it) leaves the object as it is, the
	// loop's own encodings of the first and last states are those of the
	// original and final objects; otherwise the original is encoded here.
	nsKept := namespaceKept(obj, reqNS)
	var original []byte
	if !nsKept {
		original = jsonv.AppendSemantic(make([]byte, 0, len(req.Object)), obj)
	}
	setNamespace(obj, reqNS)

	// With disjoint locations the mutators' change tracking decides the
	// loop without encoding the object (see loop). The request namespace
	// is never in a mutator's way (no mutator writes metadata.namespace).
	res, err := s.loop(obj, ns, req.Operation, len(req.Object)+len(req.Object)/4, req.Scratch, s.disjoint)
	if err != nil || !res.mutated {
		return nil, false, err
	}
	switch {
	case !nsKept:
		setNamespace(obj, oldNS)
		if string(jsonv.AppendSemantic(make([]byte, 0, len(original)+64), obj)) == string(original) {
			return nil, false, nil
		}
	case res.known:
		if !res.differs {
			return nil, false, nil
		}
	case res.first != nil:
		if jsonv.SameTyped(res.first, res.last) {
			return nil, false, nil
		}
	default:
		// Disjoint locations, but iterations after the first changed the
		// object too (rare): compare with the original, read again.
		if orig, err := jsonv.Parse(req.Object, jsonv.IntsPreserved); err == nil && jsonv.SameJSON(orig, obj) {
			return nil, false, nil
		}
	}
	if req.Out == nil {
		req.Out = make([]byte, 0, len(req.Object)+256)
	}
	return jsonv.Encode(req.Out, obj), true, nil
}

// namespaceKept reports whether setNamespace(obj, ns) and the restore of
// the object's own metadata.namespace both leave obj as it is: metadata is
// an object whose namespace is the string ns, or is absent when ns is "".
func namespaceKept(obj *jsonv.Value, ns string) bool {
	md := obj.Field("metadata")
	if md == nil || md.K != jsonv.Object {
		return false
	}
	v, ok := md.O.Get("namespace")
	if ns == "" {
		return !ok
	}
	return ok && v.K == jsonv.String && v.S == ns
}

// loopResult is what the convergence loop found.
type loopResult struct {
	// mutated: some iteration changed the object (Gatekeeper's answer
	// before comparing the final object with the original).
	mutated bool
	// known (fast loops): differs says whether the final object differs
	// from the original as a JSON value; only the first iteration changed
	// the object, and its writes did not undo each other.
	known, differs bool
	// first and last (loops that are not fast): AppendTyped encodings of
	// the object before the first iteration and at the end.
	first, last []byte
}

// loop runs the iterations.
//
// A fast loop (disjoint locations) trusts the mutators' change tracking both ways: an iteration
// whose writes changed nothing left the object as it was, and one whose
// writes changed something changed the object, since with disjoint
// locations no write undoes another. It never encodes the object. The
// other loops encode the object before and after each iteration that
// changed something and compare, as Gatekeeper compares the objects.
func (s *System) loop(obj *jsonv.Value, ns *match.Namespace, op string, sizeHint int, sc *Scratch, fast bool) (loopResult, error) {
	maxIterations := len(s.muts) + 1
	var applied []int          // the mutators that applied in the iteration
	var first, old, cur []byte // the object at the iteration's start and end (AppendTyped)
	next := 1                  // the Scratch buffer cur takes when it needs a new one
	semantic := false          // fast: a write of the first iteration changed the JSON value
	mo := matchObject(obj)
	for iteration := 1; iteration <= maxIterations; iteration++ {
		applied = applied[:0]
		changed, sem := false, false // a mutation of this iteration changed the object
		for i, m := range s.muts {
			if s.conflicts[i] {
				continue
			}
			matches := true
			if m.Kind != mutators.KindAssignMetadata && !match.AppliesGVKAndOperation(m.ApplyTo, mo.GVK, op) {
				matches = false
			}
			if matches {
				var err error
				matches, err = match.Matches(&m.Match, &match.Target{Object: mo, Namespace: ns, Source: "Original"})
				if err != nil {
					return loopResult{}, errors.New("matching for mutator " + m.GKID() + " failed for " + describe(mo) + ": " + err.Error())
				}
			}
			if !matches {
				continue
			}
			if !fast && len(old) == 0 {
				// Nothing changed since the iteration started (an encoding is
				// never empty).
				old = jsonv.AppendTyped(sc.buf(0, sizeHint), obj)
			}
			mu := mutators.Mutable{Object: obj, Namespace: mo.Namespace, Name: mo.Name}
			did, err := m.Mutate(&mu)
			changed = changed || mu.Changed
			sem = sem || mu.Semantic
			if did {
				applied = append(applied, i)
				if mu.Changed && m.ChangesMatchedFields() {
					// Read again what matching reads; a mutation elsewhere
					// leaves it as it is.
					mo = matchObject(obj)
				}
			}
			if err != nil {
				return loopResult{}, errors.New("mutation for mutator " + m.GKID() + " failed for " + describe(mo) + ": " + err.Error())
			}
		}
		if len(applied) == 0 || !changed {
			// Nothing changed: the object is as the iteration found it
			// (every write of the mutations that applied put back a value
			// Equal to the one it replaced), which its encoding would say
			// too.
			if fast {
				return loopResult{mutated: iteration != 1, known: iteration == 2, differs: semantic}, nil
			}
			return loopResult{mutated: iteration != 1, first: first, last: old}, nil
		}
		if fast {
			if iteration == 1 {
				semantic = sem
			}
			continue
		}
		if cur == nil {
			cur = sc.buf(next, len(old)+len(old)/4)
			next++
		}
		cur = jsonv.AppendTyped(cur[:0], obj)
		if string(cur) == string(old) {
			return loopResult{mutated: iteration != 1, first: first, last: cur}, nil
		}
		if iteration == 1 {
			// Keep the object's first state; the next iteration starts
			// from this one.
			first, old, cur = old, cur, nil
			continue
		}
		// The next iteration starts from this state: reuse its encoding.
		old, cur = cur, old
	}
	return loopResult{}, notConverging{msg: ErrNotConverging.Error() + ": mutation not converging for " + describe(mo) +
		" (after " + itoa(maxIterations) + " iterations; mutators applied in the last one: " + s.joinIDs(applied) + ")"}
}

// joinIDs lists the mutators at indexes idx as "Kind/name, ...".
func (s *System) joinIDs(idx []int) string {
	ids := make([]string, len(idx))
	for j, i := range idx {
		ids[j] = s.muts[i].ID()
	}
	return strings.Join(ids, ", ")
}

type notConverging struct{ msg string }

func (e notConverging) Error() string { return e.msg }
func (e notConverging) Unwrap() error { return ErrNotConverging }

// clusterError wraps ErrCluster with one line of detail.
type clusterError string

func (e clusterError) Error() string { return ErrCluster.Error() + ": " + string(e) }
func (e clusterError) Unwrap() error { return ErrCluster }

// clusterNamespace reads the request's namespace through req.Cluster.
func (s *System) clusterNamespace(req Request) (*match.Namespace, error) {
	if req.Cluster == nil {
		return nil, clusterError("the settings say fromCluster but this evaluation has no cluster to ask")
	}
	raw, found, err := req.Cluster(req.Namespace)
	if err != nil {
		return nil, clusterError("getting Namespace " + req.Namespace + ": " + err.Error())
	}
	if !found {
		// The apiserver's answer, which the webhook returns as its error.
		return nil, clusterError(`namespaces "` + req.Namespace + `" not found`)
	}
	v, err := jsonv.Parse(raw, jsonv.IntsPreserved)
	if err != nil {
		return nil, clusterError("the cluster's answer for Namespace " + req.Namespace + " is not JSON: " + err.Error())
	}
	ns, err := namespaceOf(v)
	if err != nil {
		return nil, clusterError("the cluster's answer for Namespace " + req.Namespace + ": " + err.Error())
	}
	return ns, nil
}
