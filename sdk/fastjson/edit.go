package fastjson

import "errors"

// ErrOverlap: two edits change overlapping parts of the document.
var ErrOverlap = errors.New("fastjson: edits overlap")

// ErrNotEditable: the value given to an edit is missing, of the wrong kind,
// or not from the editor's document.
var ErrNotEditable = errors.New("fastjson: value cannot be edited")

// edit replaces doc[s:e] with text (an insertion when s == e).
type edit struct {
	s, e int
	text []byte
}

// Editor records edits of one value (typically a document, or the object
// of a request inside a document) and applies them in Bytes. The values
// given to its methods must lie inside that value. Every edit refers to the
// original bytes: an edit inside a value replaced by an earlier edit is an
// overlap, which Bytes reports.
type Editor struct {
	root  Value
	doc   []byte
	edits []edit
	err   error
}

// NewEditor returns an Editor of v.
func NewEditor(v Value) *Editor {
	e := &Editor{root: v}
	if v.Exists() {
		e.doc = v.d.b
	} else {
		e.err = ErrNotEditable
	}
	return e
}

// Changed reports whether any edit was recorded.
func (e *Editor) Changed() bool { return len(e.edits) > 0 }

func (e *Editor) check(v Value, k Kind) bool {
	if e.err != nil {
		return false
	}
	if !v.Exists() || (k != Missing && v.Kind() != k) || v.d != e.root.d || v.s < e.root.s || v.e > e.root.e {
		e.err = ErrNotEditable
		return false
	}
	return true
}

// Replace replaces value v with raw, which must be one JSON value.
func (e *Editor) Replace(v Value, raw []byte) {
	if e.check(v, Missing) {
		e.edits = append(e.edits, edit{s: v.s, e: v.e, text: raw})
	}
}

// Append adds raw (one JSON value) as the last element of array a.
func (e *Editor) Append(a Value, raw []byte) {
	if !e.check(a, Array) {
		return
	}
	last := -1 // a loop, not ForEach: TinyGo allocates a callback that captures last
	it := a.Iter()
	for it.Next() {
		last = it.Value().e
	}
	if last < 0 { // empty: insert before ']'
		e.edits = append(e.edits, edit{s: a.e - 1, e: a.e - 1, text: raw})
		return
	}
	text := make([]byte, 0, len(raw)+1)
	text = append(append(text, ','), raw...)
	e.edits = append(e.edits, edit{s: last, e: last, text: text})
}

// Set gives the member key of object o the value raw (one JSON value):
// the value of its last occurrence is replaced, or the member is added at
// the end of the object.
func (e *Editor) Set(o Value, key string, raw []byte) {
	if !e.check(o, Object) {
		return
	}
	var found Value
	last := -1
	it := o.Iter()
	for it.Next() {
		if it.Key().Equals(key) {
			found = it.Value()
		}
		last = it.Value().e
	}
	if found.Exists() {
		e.edits = append(e.edits, edit{s: found.s, e: found.e, text: raw})
		return
	}
	text := make([]byte, 0, len(key)+len(raw)+4)
	at := o.e - 1
	if last >= 0 {
		text = append(text, ',')
		at = last
	}
	text = AppendQuote(text, key)
	text = append(text, ':')
	text = append(text, raw...)
	e.edits = append(e.edits, edit{s: at, e: at, text: text})
}

// Delete removes every member named key from object o (it rewrites the
// object's members, copying the bytes of those it keeps).
func (e *Editor) Delete(o Value, key string) {
	if !e.check(o, Object) {
		return
	}
	text := []byte{'{'}
	removed := false
	o.ForEachMember(func(k, v Value) bool {
		if k.Equals(key) {
			removed = true
			return true
		}
		if len(text) > 1 {
			text = append(text, ',')
		}
		text = append(text, e.doc[k.s:v.e]...)
		return true
	})
	if removed {
		e.edits = append(e.edits, edit{s: o.s, e: o.e, text: append(text, '}')})
	}
}

// Bytes returns the edited value's bytes with the edits applied (its bytes
// in the document, not a copy, when there are none). Edits at the same place
// apply in the order they were made.
func (e *Editor) Bytes() ([]byte, error) {
	if e.err == nil && len(e.edits) == 0 {
		return e.root.Raw(), nil
	}
	n, err := e.prepare()
	if err != nil {
		return nil, err
	}
	return e.appendEdited(make([]byte, 0, n)), nil
}

// prepare sorts the edits by offset, checks they do not overlap and returns
// the length of the edited value.
func (e *Editor) prepare() (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	// Insertion sort, stable (edits are few; sort.SliceStable needs reflection).
	for i := 1; i < len(e.edits); i++ {
		for j := i; j > 0 && e.edits[j].s < e.edits[j-1].s; j-- {
			e.edits[j], e.edits[j-1] = e.edits[j-1], e.edits[j]
		}
	}
	n := e.root.e - e.root.s
	for i, ed := range e.edits {
		if i > 0 && ed.s < e.edits[i-1].e {
			return 0, ErrOverlap
		}
		n += len(ed.text) - (ed.e - ed.s)
	}
	return n, nil
}

// appendEdited appends the value with the edits, which prepare sorted.
func (e *Editor) appendEdited(out []byte) []byte {
	at := e.root.s
	for _, ed := range e.edits {
		out = append(out, e.doc[at:ed.s]...)
		out = append(out, ed.text...)
		at = ed.e
	}
	return append(out, e.doc[at:e.root.e]...)
}

// mutateHead and mutateTail surround the object in MutateRequest's answer.
const mutateHead, mutateTail = `{"accepted":true,"mutated_object":`, `}`

// MutateRequest is the Kubewarden ValidationResponse that accepts the
// request with object as mutated_object (one JSON object, typically an
// Editor's Bytes), built without encoding the object again:
// {"accepted":true,"mutated_object":<object>}.
func MutateRequest(object []byte) []byte {
	out := make([]byte, 0, len(mutateHead)+len(object)+len(mutateTail))
	out = append(out, mutateHead...)
	out = append(out, object...)
	return append(out, mutateTail...)
}

// AppendMutateRequest appends MutateRequest's answer with the edited value
// of e as mutated_object to dst, copying the document's bytes once (no
// Bytes, then a copy of it): with a dst kept from call to call, the answer
// costs no allocation.
func AppendMutateRequest(dst []byte, e *Editor) ([]byte, error) {
	n, err := e.prepare()
	if err != nil {
		return dst, err
	}
	if need := len(mutateHead) + n + len(mutateTail); cap(dst)-len(dst) < need {
		dst = append(make([]byte, 0, len(dst)+need), dst...)
	}
	dst = append(dst, mutateHead...)
	dst = e.appendEdited(dst)
	return append(dst, mutateTail...), nil
}
