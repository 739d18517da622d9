//go:build !wasip1

package policytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// callbackFailure is the prefix the host puts before the text of a
// capability that failed (Kubewarden's "Callback evaluation failure: ...").
const callbackFailure = "Callback evaluation failure: "

// Call is a host call the policy made (other than logging).
type Call struct {
	Namespace, Operation string
	Payload              []byte
}

// canned is one canned answer: the request (normalized) and its answer.
type canned struct {
	request any
	raw     string // the request as given, for error messages
	answer  []byte
	errMsg  string
	isErr   bool
}

// Answer makes the Host answer the host call namespace/operation whose
// payload equals request with answer, as often as the policy asks.
//
// request is compared as a JSON value: a json.RawMessage or []byte is taken
// as JSON, anything else (a struct of sdk/capabilities, a map, a string for
// the oci and net operations, which take a JSON string) is encoded with
// encoding/json. As in the host, null and absent fields are the same,
// field_masks is a set, a list's disable_cache false may be left out, and
// can_i's resourceAttributes (policy-sdk-go) is resource_attributes.
//
// answer is the answer's payload: a json.RawMessage or []byte verbatim,
// anything else encoded with encoding/json.
//
// A call that no canned answer, Handle handler or replay session covers gets
// an error naming the call and the requests that were canned for it.
func (h *Host) Answer(namespace, operation string, request, answer any) error {
	c, err := newCanned(namespace, operation, request)
	if err != nil {
		return err
	}
	if c.answer, err = toJSON(answer); err != nil {
		return fmt.Errorf("policytest: answer to %s/%s: %w", namespace, operation, err)
	}
	h.addCanned(namespace, operation, c)
	return nil
}

// Fail makes the Host answer the host call namespace/operation whose payload
// equals request (compared as in Answer) with an error: the policy sees the
// host's "Callback evaluation failure: " followed by message, as for a
// capability that failed in tollgate or Kubewarden (for instance
// "Cannot find v1/Namespace named 'x' inside of namespace 'None'").
func (h *Host) Fail(namespace, operation string, request any, message string) error {
	c, err := newCanned(namespace, operation, request)
	if err != nil {
		return err
	}
	c.isErr, c.errMsg = true, message
	h.addCanned(namespace, operation, c)
	return nil
}

// Calls returns the host calls the policy made so far (logging aside), in
// order.
func (h *Host) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Call(nil), h.calls...)
}

func newCanned(namespace, operation string, request any) (*canned, error) {
	raw, err := toJSON(request)
	if err != nil {
		return nil, fmt.Errorf("policytest: request of %s/%s: %w", namespace, operation, err)
	}
	norm, err := normalizePayload(namespace, operation, raw)
	if err != nil {
		return nil, fmt.Errorf("policytest: request of %s/%s: %w", namespace, operation, err)
	}
	return &canned{request: norm, raw: string(raw)}, nil
}

func (h *Host) addCanned(namespace, operation string, c *canned) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.canned == nil {
		h.canned = map[string][]*canned{}
	}
	key := namespace + "/" + operation
	h.canned[key] = append(h.canned[key], c)
}

// answerCanned answers from the canned answers; ok is false when none is
// canned for namespace/operation.
func (h *Host) answerCanned(namespace, operation string, payload []byte) (answer []byte, err error, ok bool) {
	h.mu.Lock()
	list := h.canned[namespace+"/"+operation]
	h.mu.Unlock()
	if len(list) == 0 {
		return nil, nil, false
	}
	norm, err := normalizePayload(namespace, operation, payload)
	if err != nil {
		return nil, fmt.Errorf("invalid host call payload: %w", err), true
	}
	var known []string
	for _, c := range list {
		if reflect.DeepEqual(c.request, norm) {
			if c.isErr {
				return nil, fmt.Errorf("%s%s", callbackFailure, c.errMsg), true
			}
			return append([]byte(nil), c.answer...), nil, true
		}
		known = append(known, c.raw)
	}
	return nil, fmt.Errorf("policytest: no canned answer for %s/%s %s (canned: %s)", namespace, operation, payload, strings.Join(known, ", ")), true
}

func toJSON(v any) ([]byte, error) {
	switch v := v.(type) {
	case json.RawMessage:
		return v, nil
	case []byte:
		return v, nil
	}
	return json.Marshal(v)
}

// normalizePayload decodes a host-call payload into the value the host
// compares: nulls dropped, field_masks sorted, a list's disable_cache false
// dropped, can_i's resourceAttributes renamed, an oci/v1/verify variant
// object and an oci/v2/verify "type" field both turned into
// {"variant": ..., "fields": ...}.
func normalizePayload(namespace, operation string, payload []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return normalize(namespace+"/"+operation, v), nil
}

func normalize(capability string, v any) any {
	v = dropNulls(v)
	m, _ := v.(map[string]any)
	if m == nil {
		return v
	}
	switch capability {
	case "kubernetes/list_resources_by_namespace", "kubernetes/list_resources_all":
		if dc, ok := m["disable_cache"].(bool); ok && !dc {
			delete(m, "disable_cache")
		}
	case "kubernetes/can_i":
		if sar, ok := m["subject_access_review"].(map[string]any); ok {
			if ra, ok := sar["resourceAttributes"]; ok {
				if _, both := sar["resource_attributes"]; !both {
					sar["resource_attributes"] = ra
					delete(sar, "resourceAttributes")
				}
			}
		}
	case "oci/v1/verify":
		if len(m) == 1 {
			for variant, fields := range m {
				return map[string]any{"variant": variant, "fields": fields}
			}
		}
	case "oci/v2/verify":
		if variant, ok := m["type"].(string); ok {
			delete(m, "type")
			return map[string]any{"variant": variant, "fields": m}
		}
	}
	if masks, ok := m["field_masks"].([]any); ok {
		sort.Slice(masks, func(i, j int) bool { return fmt.Sprint(masks[i]) < fmt.Sprint(masks[j]) })
	}
	return m
}

func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			v[k] = dropNulls(e)
		}
	case []any:
		for i, e := range v {
			v[i] = dropNulls(e)
		}
	}
	return v
}
