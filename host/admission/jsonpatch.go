package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// Operation is one RFC 6902 operation.
type Operation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// MarshalJSON keeps "value" for add/replace even when it is null.
func (o Operation) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"op":`)
	op, _ := json.Marshal(o.Op)
	b.Write(op)
	b.WriteString(`,"path":`)
	p, _ := json.Marshal(o.Path)
	b.Write(p)
	if o.Op != "remove" {
		v, err := json.Marshal(o.Value)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"value":`)
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Diff returns the RFC 6902 JSONPatch that turns original into modified, or
// nil when they are equal. The patch is deterministic (object keys in sorted
// order) and small: objects are diffed key by key, arrays by trimming the common
// prefix and suffix and diffing what remains position by position. An empty
// original (absent object) gives one "add" of the whole document at "".
//
// Diff walks the raw bytes of both documents (rawdiff.go) and falls back to
// diffDecoded, the reference, for anything but well-formed single documents;
// both give the same bytes.
func Diff(original, modified []byte) ([]byte, error) {
	if len(bytes.TrimSpace(original)) > 0 {
		if patch, ok := diffRaw(original, modified); ok {
			return patch, nil
		}
	}
	return diffDecoded(original, modified)
}

// DiffIndexed is Diff with the modified document given as doc[s:e], a value
// that x indexes (fastjson.Index.ScanValue checked and indexed it while the
// host decoded the policy's answer, so that mutated_object is scanned once).
// The patch and the errors are Diff's.
func DiffIndexed(original, doc []byte, x *fastjson.Index, s, e int) ([]byte, error) {
	if len(bytes.TrimSpace(original)) > 0 {
		if patch, ok := diffRawIndexed(original, doc, x, s, e); ok {
			return patch, nil
		}
	}
	return diffDecoded(original, doc[s:e])
}

// diffDecoded is the reference Diff: it decodes both documents into
// map[string]any (numbers as json.Number), compares with reflect.DeepEqual and
// encodes the operations with encoding/json.
func diffDecoded(original, modified []byte) ([]byte, error) {
	var a, b any
	if len(bytes.TrimSpace(original)) > 0 {
		if err := decode(original, &a); err != nil {
			return nil, fmt.Errorf("original document: %w", err)
		}
	}
	if err := decode(modified, &b); err != nil {
		return nil, fmt.Errorf("modified document: %w", err)
	}
	var ops []Operation
	if len(bytes.TrimSpace(original)) == 0 {
		ops = []Operation{{Op: "add", Path: "", Value: b}}
	} else {
		ops = diffValue(nil, "", a, b)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

func decode(data []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	return nil
}

func diffValue(ops []Operation, path string, a, b any) []Operation {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			return diffObject(ops, path, av, bv)
		}
	case []any:
		if bv, ok := b.([]any); ok {
			return diffArray(ops, path, av, bv)
		}
	}
	if equal(a, b) {
		return ops
	}
	return append(ops, Operation{Op: "replace", Path: path, Value: b})
}

func diffObject(ops []Operation, path string, a, b map[string]any) []Operation {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := path + "/" + escape(k)
		av, inA := a[k]
		bv, inB := b[k]
		switch {
		case inA && !inB:
			ops = append(ops, Operation{Op: "remove", Path: p})
		case !inA && inB:
			ops = append(ops, Operation{Op: "add", Path: p, Value: bv})
		default:
			ops = diffValue(ops, p, av, bv)
		}
	}
	return ops
}

func diffArray(ops []Operation, path string, a, b []any) []Operation {
	pre := 0
	for pre < len(a) && pre < len(b) && equal(a[pre], b[pre]) {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && equal(a[len(a)-1-suf], b[len(b)-1-suf]) {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	n := min(len(ma), len(mb))
	for i := 0; i < n; i++ {
		ops = diffValue(ops, path+"/"+strconv.Itoa(pre+i), ma[i], mb[i])
	}
	for i := n; i < len(ma); i++ { // removals: the index stays put as elements shift left
		ops = append(ops, Operation{Op: "remove", Path: path + "/" + strconv.Itoa(pre+n)})
	}
	for i := n; i < len(mb); i++ {
		ops = append(ops, Operation{Op: "add", Path: path + "/" + strconv.Itoa(pre+i), Value: mb[i]})
	}
	return ops
}

func equal(a, b any) bool { return reflect.DeepEqual(a, b) }

var escaper = strings.NewReplacer("~", "~0", "/", "~1")

func escape(s string) string { return escaper.Replace(s) }
