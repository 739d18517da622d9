package main

import (
	"strings"
	"unicode/utf8"

	kubewarden "github.com/kubewarden/policy-sdk-go"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// droppedCapabilityJSON is droppedCapability as a JSON string, and as a one-element JSON array.
var (
	droppedCapabilityJSON      = fastjson.Quote(droppedCapability)
	droppedCapabilityArrayJSON = []byte("[" + string(droppedCapabilityJSON) + "]")
)

// parser and answer are kept from one call to the next: the payload's index
// (four bytes per payload byte) and the mutated answer (the payload's size)
// are allocated once, not on every call. Those two were four fifths of a
// call's garbage, and TinyGo's collector runs (sweeping the whole heap) each
// time the garbage fills the heap's free third: fewer bytes allocated per
// call is fewer collections per call. A waPC guest serves one call at a
// time, and the host copies the answer out of linear memory before the next
// one, so the answer's buffer may be overwritten by the next call.
var (
	parser fastjson.Parser
	answer []byte
)

// validate mutates a Pod whose containers add capabilities so that they also drop BPF.
//
// It reads the request with sdk/fastjson (no reflection: TinyGo's encoding/json is what a call
// used to spend its time in) and answers the mutated Pod as the request's bytes with "BPF" spliced
// into the drop lists, so the rest of the Pod is neither decoded nor encoded again. The decisions
// are those of validateDecoded, step for step: keys match as when decoding into a map (exactly,
// the last of repeated keys counting), values of unexpected types count as absent.
func validate(payload []byte) ([]byte, error) {
	root, err := parser.Parse(payload)
	if err != nil || !plainObject(root, "request") {
		return validateDecoded(payload)
	}
	request := root.Get("request")
	if !plainObject(request, "kind", "object") {
		return validateDecoded(payload)
	}
	kind := request.Get("kind")
	if !plainObject(kind, "kind") || kind.Get("kind").Kind() != fastjson.String {
		return validateDecoded(payload)
	}
	if !kind.Get("kind").Equals("Pod") || request.Get("object").IsNull() {
		// Not a Pod, or a DELETE (no object): nothing to mutate.
		return kubewarden.AcceptRequest()
	}
	pod := request.Get("object")
	if pod.Kind() != fastjson.Object {
		return validateDecoded(payload) // the Pod does not decode: validateDecoded says why
	}
	ed := fastjson.NewEditor(pod)
	spec := pod.Get("spec")
	for _, field := range containerFields {
		it := spec.Get(field).Iter()
		for it.Next() {
			dropFromContainerJSON(ed, it.Value())
		}
	}
	if !ed.Changed() {
		return kubewarden.AcceptRequest()
	}
	out, err := fastjson.AppendMutateRequest(answer[:0], ed)
	if err != nil { // cannot happen: each edit touches its own drop list
		return validateDecoded(payload)
	}
	answer = out
	return out, nil
}

// dropFromContainerJSON records the edit adding droppedCapability to the drop list of a
// container that adds capabilities and does not drop it already (dropFromContainer's rules).
func dropFromContainerJSON(ed *fastjson.Editor, container fastjson.Value) {
	capabilities := container.Get("securityContext", "capabilities")
	if capabilities.Kind() != fastjson.Object || capabilities.Get("add").Kind() != fastjson.Array || capabilities.Get("add").Len() == 0 {
		return
	}
	drop := capabilities.Get("drop")
	if drop.Kind() != fastjson.Array {
		ed.Set(capabilities, "drop", droppedCapabilityArrayJSON)
		return
	}
	it := drop.Iter()
	for it.Next() {
		if it.Value().Equals(droppedCapability) {
			return
		}
	}
	ed.Append(drop, droppedCapabilityJSON)
}

// plainObject reports whether v is an object in which each of fields, matched as encoding/json
// matches struct fields (case-insensitively), appears at most once and spelled exactly; only then
// does reading it with fastjson give what decoding it into validateDecoded's struct gives.
//
// It walks with Iter and compares plain ASCII keys in place: a callback and a decoded string per
// key were allocations, and allocating is what a TinyGo guest pays most for.
func plainObject(v fastjson.Value, fields ...string) bool {
	if v.Kind() != fastjson.Object {
		return false
	}
	var seen [4]int
	it := v.Iter()
	for it.Next() {
		k := it.Key()
		for i, f := range fields {
			fold, exact := keyMatches(k, f)
			if fold {
				seen[i]++
				if !exact || seen[i] > 1 {
					return false
				}
			}
		}
	}
	return true
}

// keyMatches compares object key k with field f (ASCII, as the struct's field names are) the way
// encoding/json matches a key to a struct field: fold is strings.EqualFold of the key's text and
// f, exact whether the text is f. A key of plain ASCII bytes is compared where it lies; one with
// an escape or a byte from 0x80 on (whose text may fold to an ASCII field, as the Kelvin sign
// folds to k) is decoded first.
func keyMatches(k fastjson.Value, f string) (fold, exact bool) {
	body := k.Raw()
	if len(body) < 2 {
		return false, false
	}
	body = body[1 : len(body)-1]
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			text, _ := k.Str()
			return strings.EqualFold(text, f), text == f
		}
	}
	if len(body) != len(f) {
		return false, false
	}
	exact = true
	for i, c := range body {
		if c != f[i] {
			exact = false
			if lower(c) != lower(f[i]) {
				return false, false
			}
		}
	}
	return true, exact
}

// lower is c in lower case when it is an ASCII letter.
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
