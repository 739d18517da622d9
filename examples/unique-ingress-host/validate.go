package main

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// ingress is the part of an Ingress the policy reads.
type ingress struct {
	name, namespace string
	hosts           []string
}

// listIngresses is the host call: every Ingress of the cluster, pruned to the hosts (apiVersion,
// kind and metadata always stay).
var listIngresses = capabilities.ListAllResourcesRequest{
	APIVersion: "networking.k8s.io/v1",
	Kind:       "Ingress",
	FieldMasks: []string{"spec.rules.host"},
}

// listParser indexes the host's list with the same memory on every evaluation (a thousand
// Ingresses are about 350 KB of JSON and 1.4 MB of index): TinyGo's heap, and the module's
// linear memory, do not grow with a fresh index per call.
var listParser fastjson.Parser

// validate reads the request and the list with sdk/fastjson, without reflection: with a thousand
// Ingresses in the cluster, decoding the list with TinyGo's encoding/json took about 45 ms of the
// evaluation's 50 (docs/benchmarks.md, "Host capabilities").
func validate(payload []byte) ([]byte, error) {
	vr, err := fastjson.Parse(payload)
	if err != nil || vr.Kind() != fastjson.Object {
		return reject("cannot decode the validation request: not a JSON object", 400)
	}
	settings, err := parseSettings(vr.Get("settings").Raw())
	if err != nil {
		return reject("settings: "+err.Error(), 400)
	}
	request := vr.Get("request")
	obj, err := readIngress(request.Get("object"))
	if err != nil {
		return reject("the request's object is not an Ingress: "+err.Error(), 400)
	}
	if obj.namespace == "" {
		obj.namespace, _ = request.Get("namespace").Str()
	}
	if obj.name == "" {
		obj.name, _ = request.Get("name").Str()
	}
	// The request's hosts, distinct, in a slice: a handful, compared in place with each listed
	// host (Equals allocates nothing), so that an Ingress of the list costs no allocation unless
	// it conflicts.
	var want []string
	for _, h := range obj.hosts {
		if h != "" && !slices.Contains(want, h) {
			want = append(want, h)
		}
	}
	if len(want) == 0 {
		return accept()
	}

	raw, err := host.ListAllResourcesRaw(listIngresses)
	if err != nil {
		return reject("cannot list the cluster's Ingresses: "+err.Error(), 500)
	}
	list, err := listParser.Parse(raw)
	if err != nil || list.Kind() != fastjson.Object {
		return reject("cannot list the cluster's Ingresses: the host's answer is not a JSON object", 500)
	}
	var conflicts []string
	var seen []bool
	for items := list.Get("items").Iter(); items.Next(); {
		item := items.Value()
		if err := checkIngress(item); err != nil {
			return reject("the host's list of Ingresses holds an item that is not an Ingress: "+err.Error(), 500)
		}
		md := item.Get("metadata")
		if sameString(md.Get("namespace"), obj.namespace) && (settings.AllowSameNamespace || sameString(md.Get("name"), obj.name)) {
			continue
		}
		seen = seen[:0]
		for range want {
			seen = append(seen, false)
		}
		for rules := item.Get("spec", "rules").Iter(); rules.Next(); {
			host := rules.Value().Get("host")
			for i, h := range want {
				if !seen[i] && host.Equals(h) {
					seen[i] = true
					ns, _ := md.Get("namespace").Str()
					name, _ := md.Get("name").Str()
					conflicts = append(conflicts, `host "`+h+`" is already used by Ingress `+ns+"/"+name)
				}
			}
		}
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return reject("Ingress "+obj.namespace+"/"+obj.name+": "+strings.Join(conflicts, "; "), 409)
	}
	return accept()
}

// readIngress reads an Ingress's name, namespace and rule hosts. Like encoding/json decoding into
// a struct, an absent or null field is empty and a field of the wrong JSON type is an error.
func readIngress(v fastjson.Value) (ingress, error) {
	var in ingress
	if err := checkIngress(v); err != nil {
		return in, err
	}
	md := v.Get("metadata")
	in.name, _ = md.Get("name").Str()
	in.namespace, _ = md.Get("namespace").Str()
	for it := v.Get("spec", "rules").Iter(); it.Next(); {
		h, _ := it.Value().Get("host").Str()
		in.hosts = append(in.hosts, h)
	}
	return in, nil
}

// checkIngress refuses an object whose fields the policy reads have the wrong JSON type, without
// allocating: readIngress for the request, alone for each listed Ingress.
func checkIngress(v fastjson.Value) error {
	if err := kindOf(v, "the object", fastjson.Object); err != nil {
		return err
	}
	md, spec := v.Get("metadata"), v.Get("spec")
	if err := kindOf(md, "metadata", fastjson.Object); err != nil {
		return err
	}
	if err := kindOf(md.Get("name"), "metadata.name", fastjson.String); err != nil {
		return err
	}
	if err := kindOf(md.Get("namespace"), "metadata.namespace", fastjson.String); err != nil {
		return err
	}
	if err := kindOf(spec, "spec", fastjson.Object); err != nil {
		return err
	}
	rules := spec.Get("rules")
	if err := kindOf(rules, "spec.rules", fastjson.Array); err != nil {
		return err
	}
	for it := rules.Iter(); it.Next(); {
		if err := kindOf(it.Value(), "spec.rules[]", fastjson.Object); err != nil {
			return err
		}
		if err := kindOf(it.Value().Get("host"), "spec.rules[].host", fastjson.String); err != nil {
			return err
		}
	}
	return nil
}

// sameString reports whether v, a string or absent or null (empty), is s.
func sameString(v fastjson.Value, s string) bool {
	if v.IsNull() {
		return s == ""
	}
	return v.Equals(s)
}

// kindOf accepts v when it is absent, null or of kind k.
func kindOf(v fastjson.Value, field string, k fastjson.Kind) error {
	switch {
	case v.IsNull() || v.Kind() == k:
		return nil
	case k == fastjson.String:
		return errors.New(field + " is not a string")
	}
	return errors.New(field + " has the wrong JSON type")
}

func accept() ([]byte, error) {
	return []byte(`{"accepted":true}`), nil
}

func reject(msg string, code uint16) ([]byte, error) {
	return json.Marshal(protocol.ValidationResponse{Accepted: false, Message: &msg, Code: &code})
}
