package gkdiff

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Gen generates random mutator sets and requests for the property
// differential run (fuzz_test.go). It is seeded and deterministic: one seed
// always gives the same trial, so a difference is reproduced from the seed it
// prints. The generator aims at the places where Gatekeeper's semantics are
// subtle rather than at uniform coverage: locations over the lists the
// objects carry (keyed by name, by integer or quoted port, globbed, missing),
// quoted and spaced names, pathTests over prefixes of the location, applyTo
// and match criteria that select some requests and not others, parameters of
// every JSON type (including numbers written 1.0), merge and prune, image
// parts valid and not, and objects whose shape fits the locations or not.
// A share of the mutators is invalid on purpose, so that refusals are
// compared too.
type Gen struct {
	r *rand.Rand
}

// NewGen returns a generator for seed.
func NewGen(seed uint64) *Gen {
	return &Gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Trial is one generated settings object and the requests run against it.
type Trial struct {
	Seed     uint64
	Mutators []map[string]any
	// Namespaces are the settings' Namespace objects.
	Namespaces []map[string]any
	Requests   []Request
}

// Settings is the trial's settings as JSON.
func (t *Trial) Settings() []byte {
	s := map[string]any{"mutators": t.Mutators}
	if len(t.Namespaces) > 0 {
		s["namespaces"] = t.Namespaces
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// Trial generates a trial of up to maxMutators mutators and nreq requests.
func (g *Gen) Trial(seed uint64, maxMutators, nreq int) Trial {
	t := Trial{Seed: seed}
	n := 1 + g.r.IntN(maxMutators)
	names := map[string]bool{}
	for i := 0; i < n; i++ {
		m := g.mutator()
		kind := m["kind"].(string)
		md := m["metadata"].(map[string]any)
		// One object per kind and name, as in a cluster (a duplicate is
		// refused by both sides; keep it rare).
		for names[kind+"/"+md["name"].(string)] && g.r.IntN(20) != 0 {
			md["name"] = g.pick(mutatorNames) + "-" + strconv.Itoa(g.r.IntN(100))
		}
		names[kind+"/"+md["name"].(string)] = true
		t.Mutators = append(t.Mutators, m)
	}
	if g.chance(0.08) {
		t.Mutators = append(t.Mutators, g.cycle()...)
	}
	for _, ns := range nsNames {
		if g.r.IntN(2) == 0 {
			t.Namespaces = append(t.Namespaces, map[string]any{
				"apiVersion": "v1", "kind": "Namespace",
				"metadata": map[string]any{"name": ns, "labels": g.labels(nsLabels)},
			})
		}
	}
	for i := 0; i < nreq; i++ {
		t.Requests = append(t.Requests, g.request())
	}
	return t
}

func (g *Gen) pick(s []string) string { return s[g.r.IntN(len(s))] }

func (g *Gen) chance(p float64) bool { return g.r.Float64() < p }

// some returns a random non-empty subset of s (in order), or all of it.
func (g *Gen) some(s []string) []any {
	var out []any
	for _, e := range s {
		if g.r.IntN(2) == 0 {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		out = append(out, s[g.r.IntN(len(s))])
	}
	return out
}

var (
	mutatorNames   = []string{"a", "b", "c", "always-pull", "set-owner", "img", "zz"}
	containerNames = []string{"main", "sidecar", "init", "new", "a b", "x.y"}
	envNames       = []string{"MODE", "NS", "LEVEL"}
	nsNames        = []string{"default", "prod", "kube-system", "team-a"}
	reqNamespaces  = []string{"default", "prod", "kube-system", "team-a", "unknown", ""}
	nsLabels       = map[string][]string{"env": {"prod", "dev"}, "team": {"a", "b"}}
	objLabels      = map[string][]string{"app": {"web", "api"}, "tier": {"front", "back"}}
	images         = []string{
		"nginx", "nginx:1.25", "library/nginx:latest", "gcr.io/proj/api:1.0", "registry.example.com:5000/team/app@sha256:" + strings.Repeat("ab", 32),
		"localhost/app", "localhost:5000/a/b:c", "docker.io/library/busybox", "my.registry/x", "UPPER/case", ":badtag", "a//b", "",
	}
	// image parts: the valid ones first (AssignImage's pools)
	domains = []string{"gcr.io", "registry.example.com:5000", "localhost", "localhost:5000", "docker.io", "my-reg.io", "bad/domain", "UPPER.io", "a.b.c:99999", "-bad.io", "x"}
	paths   = []string{"library/nginx", "team/app", "app", "a/b/c", "x-y_z", "/bad", "Bad Path", "a//b", "gcr.io/repo", "localhost/repo", "a.b/c"}
	tags    = []string{":v1", ":latest", "@sha256:" + strings.Repeat("cd", 32), "@sha256:short", "v1", ":", ":-bad", ":" + strings.Repeat("t", 130)}
)

func (g *Gen) labels(pool map[string][]string) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"env", "team", "app", "tier"} {
		if vs, ok := pool[k]; ok && g.r.IntN(3) != 0 {
			out[k] = g.pick(vs)
		}
	}
	return out
}

// target is a kind the generator makes objects of, with the prefix of its
// pod spec (empty for kinds without one).
type target struct {
	group, version, kind, podSpec string
	namespaced                    bool
}

var targets = []target{
	{"", "v1", "Pod", "spec", true},
	{"apps", "v1", "Deployment", "spec.template.spec", true},
	{"", "v1", "ConfigMap", "", true},
	{"", "v1", "Namespace", "", false},
	{"example.com", "v1", "Widget", "", true},
}

// --- mutators ---------------------------------------------------------------

func (g *Gen) mutator() map[string]any {
	var kind string
	switch x := g.r.IntN(10); {
	case x < 4:
		kind = "Assign"
	case x < 6:
		kind = "AssignMetadata"
	case x < 8:
		kind = "ModifySet"
	default:
		kind = "AssignImage"
	}
	version := g.pick([]string{"v1", "v1beta1", "v1alpha1"})
	if kind == "AssignImage" && !g.chance(0.01) {
		version = "v1alpha1"
	}
	spec := map[string]any{}
	if kind != "AssignMetadata" && !g.chance(0.005) {
		spec["applyTo"] = g.applyTo()
	}
	if g.chance(0.6) {
		spec["match"] = g.match()
	}
	params := map[string]any{}
	var loc []string
	switch kind {
	case "Assign":
		loc = g.assignLocation()
		params["assign"] = g.assignValue(loc)
	case "AssignMetadata":
		loc = g.metadataLocation()
		if g.chance(0.15) {
			params["assign"] = map[string]any{"fromMetadata": map[string]any{"field": g.pick([]string{"namespace", "name"})}}
		} else {
			var v any = g.pick([]string{"alice", "team-a", "", "x/y"})
			if g.chance(0.02) {
				v = g.scalar()
			}
			params["assign"] = map[string]any{"value": v}
		}
	case "ModifySet":
		loc = g.listLocation()
		if op := g.r.IntN(3); op == 1 {
			params["operation"] = "merge"
		} else if op == 2 {
			params["operation"] = "prune"
		}
		var vals []any
		for i := g.r.IntN(4); i >= 0; i-- {
			vals = append(vals, g.setValue())
		}
		if g.chance(0.05) {
			vals = nil
		}
		params["values"] = map[string]any{"fromList": vals}
	case "AssignImage":
		loc = g.imageLocation()
		// Mostly valid parts; the invalid ones come from the end of the
		// pools.
		part := func(pool []string, valid int) string {
			if g.chance(0.03) {
				return g.pick(pool)
			}
			return g.pick(pool[:valid])
		}
		for len(params) == 0 || g.chance(0.01) {
			if g.chance(0.5) {
				params["assignDomain"] = part(domains, 6)
			}
			if g.chance(0.4) {
				params["assignPath"] = part(paths, 4)
			}
			if g.chance(0.5) {
				params["assignTag"] = part(tags, 3)
			}
			if g.chance(0.01) {
				break
			}
		}
	}
	if kind != "AssignMetadata" && g.chance(0.25) {
		params["pathTests"] = g.pathTests(loc)
	}
	spec["location"] = g.join(loc)
	spec["parameters"] = params
	name := g.pick(mutatorNames)
	if g.chance(0.01) {
		name = "Bad_Name"
	}
	return map[string]any{
		"apiVersion": "mutations.gatekeeper.sh/" + version,
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}
}

func (g *Gen) applyTo() []any {
	pool := []map[string]any{
		{"groups": []any{""}, "versions": []any{"v1"}, "kinds": []any{"Pod"}},
		{"groups": []any{"apps"}, "versions": []any{"v1"}, "kinds": []any{"Deployment"}},
		{"groups": []any{""}, "versions": []any{"v1"}, "kinds": []any{"ConfigMap", "Namespace"}},
		{"groups": []any{"", "apps"}, "versions": []any{"v1", "v1beta1"}, "kinds": []any{"Pod", "Deployment"}},
		{"groups": []any{"example.com"}, "versions": []any{"v1"}, "kinds": []any{"Widget"}},
		{"groups": []any{"*"}, "versions": []any{"v1"}, "kinds": []any{"Pod"}},
	}
	var out []any
	for i := 1 + g.r.IntN(2); i > 0; i-- {
		e := map[string]any{}
		for k, v := range pool[g.r.IntN(len(pool))] {
			e[k] = v
		}
		if g.chance(0.25) {
			e["operations"] = g.some([]string{"CREATE", "UPDATE"})
			if g.chance(0.3) {
				e["operations"] = []any{"*"}
			}
			if g.chance(0.02) {
				e["operations"] = []any{"CREATE", "*"} // refused
			}
		}
		out = append(out, e)
	}
	return out
}

func (g *Gen) selector(pool map[string][]string) map[string]any {
	s := map[string]any{}
	if g.chance(0.5) {
		s["matchLabels"] = g.labels(pool)
	}
	if g.chance(0.5) || len(s) == 0 {
		var exprs []any
		keys := []string{}
		for k := range pool {
			keys = append(keys, k)
		}
		// map order is random: sort for determinism
		for i := range keys {
			for j := i + 1; j < len(keys); j++ {
				if keys[j] < keys[i] {
					keys[i], keys[j] = keys[j], keys[i]
				}
			}
		}
		for i := 1 + g.r.IntN(2); i > 0; i-- {
			k := g.pick(keys)
			e := map[string]any{"key": k}
			switch op := g.pick([]string{"In", "NotIn", "Exists", "DoesNotExist", "In-empty", "Bogus"}); op {
			case "In", "NotIn":
				e["operator"] = op
				e["values"] = g.some(pool[k])
			case "In-empty":
				e["operator"] = "In"
			default:
				e["operator"] = op
			}
			exprs = append(exprs, e)
		}
		s["matchExpressions"] = exprs
	}
	return s
}

func (g *Gen) match() map[string]any {
	m := map[string]any{}
	if g.chance(0.3) {
		var kinds []any
		for i := 1 + g.r.IntN(2); i > 0; i-- {
			kinds = append(kinds, map[string]any{
				"apiGroups": g.some([]string{"*", "", "apps"}),
				"kinds":     g.some([]string{"Pod", "Deployment", "ConfigMap", "Namespace", "*"}),
			})
		}
		m["kinds"] = kinds
	}
	if g.chance(0.3) {
		m["scope"] = g.pick([]string{"Namespaced", "Cluster", "*", "Bogus"})
	}
	nsPool := []string{"default", "prod", "prod*", "*-system", "kube-*", "team-a", "*a"}
	if g.chance(0.02) {
		nsPool = append(nsPool, "Bad_NS")
	}
	if g.chance(0.25) {
		m["namespaces"] = g.some(nsPool)
	}
	if g.chance(0.2) {
		m["excludedNamespaces"] = g.some(nsPool)
	}
	if g.chance(0.25) {
		m["labelSelector"] = g.selector(objLabels)
	}
	if g.chance(0.25) {
		m["namespaceSelector"] = g.selector(nsLabels)
	}
	if g.chance(0.15) {
		m["name"] = g.pick([]string{"web", "web*", "*-1", "checkout-*", "team-a", "api"})
		if g.chance(0.02) {
			m["name"] = "Bad Name"
		}
	}
	if g.chance(0.15) {
		m["source"] = g.pick([]string{"All", "Original", "Generated"})
	}
	return m
}

// --- locations --------------------------------------------------------------

// name writes a path name, sometimes quoted (names that need it always are).
func (g *Gen) name(n string) string {
	plain := n != ""
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			plain = false
		}
	}
	if plain && n[0] >= '0' && n[0] <= '9' {
		plain = false
	}
	if plain && !g.chance(0.1) {
		return n
	}
	if g.chance(0.5) {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(n, `\`, `\\`), "'", `\'`) + "'"
	}
	return strconv.Quote(n)
}

// keyed writes a keyed list segment.
func (g *Gen) keyed(list, key, value string) string {
	sp := ""
	if g.chance(0.1) {
		sp = " "
	}
	return g.name(list) + sp + "[" + sp + g.name(key) + sp + ":" + sp + value + sp + "]"
}

func (g *Gen) containerKey() string {
	switch x := g.r.IntN(10); {
	case x < 3:
		return "*"
	case x < 4:
		return `"*"`
	default:
		n := g.pick(containerNames)
		return g.name(n)
	}
}

func (g *Gen) podSpec() []string {
	return strings.Split(g.pick([]string{"spec", "spec", "spec.template.spec"}), ".")
}

func (g *Gen) containerList() string {
	return g.pick([]string{"containers", "containers", "containers", "initContainers", "ephemeralContainers"})
}

func (g *Gen) join(segs []string) string {
	sep := "."
	if g.chance(0.05) {
		sep = " . "
	}
	return strings.Join(segs, sep)
}

func (g *Gen) assignLocation() []string {
	p := g.podSpec()
	c := func() []string {
		return append(append([]string{}, p...), g.keyed(g.containerList(), "name", g.containerKey()))
	}
	if g.chance(0.04) {
		if g.chance(0.3) {
			return []string{"metadata", "labels", "x"} // refused: Assign cannot change metadata
		}
		// syntax and structure errors
		return []string{g.pick([]string{"spec..x", "spec.", "[name: x]", "spec.containers[name: main][name: x]", "spec.containers[*]", "spec.containers[foo]", "spec.containers[name: *]", "1spec.x", "spec.'unterminated", `spec."a\qb"`})}
	}
	if g.chance(0.08) {
		// shapes that conflict with the keyed containers list of the other
		// locations: another key, or an object
		if g.chance(0.5) {
			return append(append([]string{}, p...), g.keyed("containers", "image", g.name("nginx")), "imagePullPolicy")
		}
		return append(append([]string{}, p...), "containers", "x")
	}
	switch g.r.IntN(20) {
	case 0:
		return append(c(), "imagePullPolicy")
	case 1:
		return append(c(), "securityContext", "privileged")
	case 2:
		return append(c(), g.keyed("env", "name", g.name(g.pick(envNames))), "value")
	case 3:
		port := g.pick([]string{"8080", `"8080"`, "9090", "15000", "*", "8080.0"})
		return append(c(), g.keyed("ports", "containerPort", port), "protocol")
	case 4:
		return append(c(), g.keyed("ports", "name", g.name(g.pick([]string{"http", "metrics", "admin", "grpc"}))))
	case 5:
		// a keyed element as the target: a glob there is refused
		key := g.name(g.pick(containerNames))
		if g.chance(0.03) {
			key = "*"
		}
		return append(append([]string{}, p...), g.keyed(g.containerList(), "name", key))
	case 6:
		return append(p, "nodeSelector", g.name("kubernetes.io/os"))
	case 7:
		return append(p, g.pick([]string{"priority", "hostNetwork", "serviceAccountName", "tolerations", "containers"}))
	case 8:
		return []string{"spec"}
	case 9:
		return []string{"data", g.name(g.pick([]string{"k", "a.b", "1", "x y"}))}
	case 10:
		return []string{"spec", g.keyed("items", "id", g.pick([]string{"1", `"1"`, "2.5", "3", "*"})), "size"}
	case 11:
		return []string{"spec", g.pick([]string{"count", "ratio", "flag", "nothing", "str", "list"})}
	case 12:
		return append(c(), "image")
	case 14:
		return []string{"status", "phase"}
	case 15:
		return append(c(), "resources", "limits", "cpu")
	case 16:
		return append(p, g.keyed("tolerations", "key", g.pick([]string{"dedicated", "*", `"x"`})), "effect")
	case 17:
		return append(c(), "args")
	case 13:
		return append(p, "securityContext", "runAsUser")
	case 18:
		return []string{"spec", "template", "metadata", "labels", "x"}
	default:
		return append(c(), "env")
	}
}

func (g *Gen) metadataLocation() []string {
	if !g.chance(0.04) {
		field := g.pick([]string{"labels", "annotations"})
		return []string{"metadata", field, g.name(g.pick([]string{"owner", "app", "tier", "example.com/team", "env"}))}
	}
	switch g.r.IntN(5) {
	case 0:
		return []string{"metadata", "name"}
	case 1:
		return []string{"metadata", "labels"}
	case 2:
		return []string{"spec", "x"}
	case 3:
		return []string{"metadata", "labels", "a", "b"}
	case 4:
		return []string{"metadata", g.keyed("labels", "name", "x")}
	}
	field := g.pick([]string{"labels", "annotations"})
	return []string{"metadata", field, g.name(g.pick([]string{"owner", "app", "tier", "example.com/team", "env"}))}
}

func (g *Gen) listLocation() []string {
	p := g.podSpec()
	c := func() []string {
		return append(append([]string{}, p...), g.keyed(g.containerList(), "name", g.containerKey()))
	}
	if g.chance(0.03) {
		if g.chance(0.5) {
			return []string{"metadata", "finalizers"} // refused
		}
		return c() // refused: a keyed list as the last segment
	}
	switch g.r.IntN(11) {
	case 0, 1, 2, 6, 7:
		return append(c(), g.pick([]string{"args", "command"}))
	case 3:
		return append(p, "tolerations")
	case 4:
		return append(p, "imagePullSecrets")
	case 5:
		return []string{"spec", "finalizers"}
	case 8:
		return []string{"spec", "list"}
	case 9:
		return append(p, "containers")
	default:
		return append(c(), "ports")
	}
}

func (g *Gen) imageLocation() []string {
	p := g.podSpec()
	c := append(append([]string{}, p...), g.keyed(g.containerList(), "name", g.containerKey()))
	if g.chance(0.03) {
		if g.chance(0.5) {
			return c // refused: list terminal
		}
		return []string{"metadata", "annotations", "image"} // refused: metadata root
	}
	if g.chance(0.1) {
		return []string{"spec", "image"}
	}
	return append(c, "image")
}

func (g *Gen) pathTests(loc []string) []any {
	var out []any
	for i := 1 + g.r.IntN(2); i > 0 && (len(out) == 0 || g.chance(0.3)); i-- {
		n := 1 + g.r.IntN(len(loc))
		sub := append([]string{}, loc[:n]...)
		if g.chance(0.03) {
			sub = append(sub, "other")
		}
		if g.chance(0.03) {
			sub = []string{"spec", "somewhere"}
		}
		t := map[string]any{"subPath": strings.Join(sub, ".")}
		if c := g.r.IntN(5); c < 2 {
			t["condition"] = "MustExist"
		} else if c < 4 {
			t["condition"] = "MustNotExist"
		}
		out = append(out, t)
	}
	return out
}

// --- values -----------------------------------------------------------------

func (g *Gen) scalar() any {
	switch g.r.IntN(9) {
	case 0:
		return g.pick([]string{"Always", "IfNotPresent", "x", "", "TCP", "UDP"})
	case 1:
		return json.Number(g.pick([]string{"1", "0", "-3", "42", "8080"}))
	case 2:
		return json.Number(g.pick([]string{"1.0", "2.5", "8080.0", "1e3", "0.5"}))
	case 3:
		return g.r.IntN(2) == 0
	case 4:
		return g.pick([]string{"main", "sidecar", "nginx"})
	default:
		return g.pick([]string{"Always", "IfNotPresent", "Never"})
	}
}

func (g *Gen) jsonValue(depth int) any {
	if depth > 1 {
		return g.scalar()
	}
	switch g.r.IntN(8) {
	case 0:
		var l []any
		for i := g.r.IntN(3); i > 0; i-- {
			l = append(l, g.jsonValue(depth+1))
		}
		if l == nil {
			l = []any{}
		}
		return l
	case 1:
		o := map[string]any{}
		for i := g.r.IntN(3); i > 0; i-- {
			o[g.pick([]string{"name", "k", "image", "value", "x"})] = g.jsonValue(depth + 1)
		}
		return o
	}
	return g.scalar()
}

// assignValue is an Assign's parameters.assign for the location: a value of
// any type, an object carrying the list key (or not) when the location ends
// on a keyed element, or fromMetadata.
func (g *Gen) assignValue(loc []string) map[string]any {
	if g.chance(0.1) {
		f := g.pick([]string{"namespace", "name"})
		if g.chance(0.02) {
			f = "uid"
		}
		return map[string]any{"fromMetadata": map[string]any{"field": f}}
	}
	if g.chance(0.005) {
		return map[string]any{}
	}
	last := loc[len(loc)-1]
	if i := strings.IndexByte(last, '['); i >= 0 && g.chance(0.95) {
		inner := strings.Trim(last[i+1:], " ]")
		key, val, _ := strings.Cut(inner, ":")
		key, val = unquote(strings.TrimSpace(key)), strings.TrimSpace(val)
		obj := map[string]any{"image": g.pick(images)}
		if !g.chance(0.03) {
			switch {
			case val == "*":
				obj[key] = "x"
			case strings.HasPrefix(val, `"`) || strings.HasPrefix(val, "'"):
				obj[key] = unquote(val)
			default:
				if _, err := strconv.ParseFloat(val, 64); err == nil && g.chance(0.7) {
					obj[key] = json.Number(val)
				} else {
					obj[key] = val
				}
			}
		}
		return map[string]any{"value": obj}
	}
	return map[string]any{"value": g.jsonValue(0)}
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') {
		inner := s[1 : len(s)-1]
		var b strings.Builder
		for i := 0; i < len(inner); i++ {
			if inner[i] == '\\' && i+1 < len(inner) {
				i++
			}
			b.WriteByte(inner[i])
		}
		return b.String()
	}
	return s
}

func (g *Gen) setValue() any {
	switch g.r.IntN(7) {
	case 0:
		return json.Number(g.pick([]string{"1", "2", "8080", "1.0", "2.5"}))
	case 1:
		return map[string]any{"key": g.pick([]string{"dedicated", "gpu"}), "operator": "Equal", "value": "web", "effect": "NoSchedule"}
	case 2:
		return map[string]any{"name": g.pick([]string{"regcred", "other"})}
	case 3:
		return g.r.IntN(2) == 0
	}
	return g.pick([]string{"--verbose", "--port", "8080", "-v", "sleep", "3600"})
}

// --- objects and requests ---------------------------------------------------

func (g *Gen) container(name string) any {
	if g.chance(0.02) {
		return "not-an-object"
	}
	c := map[string]any{"name": name, "image": g.pick(images)}
	if g.chance(0.05) {
		delete(c, "name")
	}
	if g.chance(0.05) {
		c["image"] = json.Number("3")
	}
	if g.chance(0.3) {
		c["imagePullPolicy"] = g.pick([]string{"Always", "IfNotPresent"})
	}
	if g.chance(0.4) {
		var env []any
		for _, n := range envNames {
			if g.chance(0.5) {
				env = append(env, map[string]any{"name": n, "value": g.pick([]string{"prod", "1", "x"})})
			}
		}
		c["env"] = env
		if g.chance(0.05) {
			c["env"] = "MODE=prod"
		}
	}
	if g.chance(0.4) {
		var ports []any
		for _, p := range []string{"8080", "9090", "8080.0", `"8080"`} {
			if g.chance(0.4) {
				var cp any = json.Number(p)
				if strings.HasPrefix(p, `"`) {
					cp = unquote(p)
				}
				ports = append(ports, map[string]any{"name": g.pick([]string{"http", "metrics", "admin"}), "containerPort": cp, "protocol": "TCP"})
			}
		}
		c["ports"] = ports
	}
	if g.chance(0.4) {
		var args []any
		for i := g.r.IntN(4); i > 0; i-- {
			args = append(args, g.setValue())
		}
		c["args"] = args
		if g.chance(0.05) {
			c["args"] = "--verbose"
		}
	}
	if g.chance(0.2) {
		c["securityContext"] = map[string]any{"privileged": g.r.IntN(2) == 0}
	}
	return c
}

func (g *Gen) podSpecObject() map[string]any {
	spec := map[string]any{}
	for _, list := range []string{"containers", "initContainers"} {
		if list == "initContainers" && !g.chance(0.3) {
			continue
		}
		var cs []any
		for i := 1 + g.r.IntN(3); i > 0; i-- {
			cs = append(cs, g.container(g.pick(containerNames)))
		}
		spec[list] = cs
	}
	if g.chance(0.03) {
		spec["containers"] = map[string]any{"main": map[string]any{"image": "nginx"}}
	}
	if g.chance(0.3) {
		spec["tolerations"] = []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}}
	}
	if g.chance(0.2) {
		spec["nodeSelector"] = map[string]any{"kubernetes.io/os": g.pick([]string{"linux", "windows"})}
	}
	if g.chance(0.2) {
		spec["imagePullSecrets"] = []any{map[string]any{"name": "regcred"}}
	}
	if g.chance(0.1) {
		spec["priority"] = json.Number(g.pick([]string{"0", "5", "5.0"}))
	}
	return spec
}

func (g *Gen) object(t target) map[string]any {
	md := map[string]any{}
	if g.chance(0.9) {
		md["name"] = g.pick([]string{"web", "api", "web-1", "team-a", "prod", "x"})
	} else {
		md["generateName"] = g.pick([]string{"checkout-", "web-"})
	}
	if t.namespaced && g.chance(0.8) {
		md["namespace"] = g.pick(nsNames)
	}
	if g.chance(0.7) {
		pool := objLabels
		if t.kind == "Namespace" {
			pool = nsLabels
		}
		l := g.labels(pool)
		if g.chance(0.05) {
			// null and non-string label values (GetLabels: null is "",
			// anything else voids the map)
			l[g.pick([]string{"app", "env", "x"})] = []any{nil, json.Number("3"), true}[g.r.IntN(3)]
		}
		md["labels"] = l
	}
	if g.chance(0.3) {
		md["annotations"] = map[string]any{"note": "existing", "owner": "bob"}
	}
	obj := map[string]any{"apiVersion": t.version, "kind": t.kind, "metadata": md}
	if t.group != "" {
		obj["apiVersion"] = t.group + "/" + t.version
	}
	switch t.kind {
	case "Pod":
		obj["spec"] = g.podSpecObject()
	case "Deployment":
		obj["spec"] = map[string]any{
			"replicas": json.Number("2"),
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "api"}}, "spec": g.podSpecObject()},
		}
	case "ConfigMap":
		obj["data"] = map[string]any{"k": "v", "a.b": "c"}
	case "Namespace":
		if g.chance(0.3) {
			obj["spec"] = map[string]any{"finalizers": []any{"kubernetes"}}
		}
	case "Widget":
		obj["spec"] = map[string]any{
			"items": []any{map[string]any{"id": json.Number("1"), "size": json.Number("10")}, map[string]any{"id": "1", "size": json.Number("20")}, map[string]any{"id": json.Number("2.5"), "size": json.Number("30")}},
			"list":  []any{"a", "b", json.Number("1"), json.Number("2.0"), map[string]any{"k": "v"}},
			"count": json.Number("3"), "ratio": json.Number("0.5"), "flag": true, "nothing": nil, "str": "hello",
		}
	}
	if g.chance(0.05) {
		obj["spec"] = []any{"not", "an", "object"}
	}
	return obj
}

func (g *Gen) request() Request {
	t := targets[g.r.IntN(len(targets))]
	if g.chance(0.4) {
		t = targets[0] // Pods most often
	}
	obj := g.object(t)
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	md := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	if t.namespaced && (ns == "" || g.chance(0.15)) {
		ns = g.pick(reqNamespaces)
	}
	op := "CREATE"
	switch x := g.r.IntN(20); {
	case x < 5:
		op = "UPDATE"
	case x == 5:
		op = g.pick([]string{"DELETE", "CONNECT"})
	}
	user := "alice"
	if g.chance(0.02) {
		user = gkServiceAccount
	}
	return Request{Operation: op, Username: user, Group: t.group, Version: t.version, Kind: t.kind, Namespace: ns, Name: name, Object: b}
}

// cycle is a chain of Assigns over apiVersion or kind, each applying to the
// value the previous one sets: closed into a loop (the set never converges)
// or left open (it converges after as many iterations as links).
func (g *Gen) cycle() []map[string]any {
	field, values := "apiVersion", []string{"v1", "v2", "v3", "v4"}
	if g.chance(0.5) {
		field, values = "kind", []string{"Pod", "Pod2", "Pod3", "Pod4"}
	}
	n := 2 + g.r.IntN(3)
	closed := g.chance(0.7)
	var out []map[string]any
	for i := 0; i < n; i++ {
		from, to := values[i], values[(i+1)%n]
		if !closed && i == n-1 {
			break
		}
		applyTo := map[string]any{"groups": []any{""}, "versions": []any{"v1"}, "kinds": []any{"Pod"}}
		if field == "apiVersion" {
			applyTo["versions"] = []any{from}
		} else {
			applyTo["kinds"] = []any{from}
		}
		out = append(out, map[string]any{
			"apiVersion": "mutations.gatekeeper.sh/v1",
			"kind":       "Assign",
			"metadata":   map[string]any{"name": "cycle-" + strconv.Itoa(g.r.IntN(1000))},
			"spec": map[string]any{
				"applyTo":    []any{applyTo},
				"location":   field,
				"parameters": map[string]any{"assign": map[string]any{"value": to}},
			},
		})
	}
	return out
}
