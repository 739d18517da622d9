package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Guest is a module that answers Kubewarden's operations (validate,
// validate_settings) with a payload in and a JSON answer out: a waPC module,
// or a WASI command adapted to them.
type Guest interface {
	// Call runs operation with payload and returns the guest's answer and
	// the part of the time spent starting the module (zero when none).
	Call(ctx context.Context, operation string, payload []byte) (out []byte, start time.Duration, err error)
}

// Evaluate runs a request through g in Kubewarden's wire protocol: the
// ValidationRequest {"request":...,"settings":...} in, a ValidationResponse
// out, its mutated_object diffed against req.Object. With reusePayload the
// payload's buffer is reused once Call returns (a waPC call has copied the
// payload into the guest by then; a wasi run may still be reading its stdin
// after a deadline).
func (c *Config) Evaluate(ctx context.Context, g Guest, req Request, reusePayload bool) (*Result, error) {
	start := time.Now()
	var buf *[]byte // from payloads, only when the payload goes back there
	var dst []byte
	if reusePayload {
		buf = payloads.Get().(*[]byte)
		dst = (*buf)[:0]
	}
	payload := c.appendPayload(dst, req.Request)
	callStart := time.Now()
	out, startCost, err := g.Call(ctx, "validate", payload)
	guest := time.Since(callStart)
	if buf != nil && cap(payload) <= maxPooledPayload {
		*buf = payload
		payloads.Put(buf)
	}
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", c.ID, err)
	}
	res := &Result{GuestDuration: guest, StartDuration: startCost}
	defer func() { res.Duration = time.Since(start) }()
	if err := c.decide(res, req.Object, out); err != nil {
		return nil, err
	}
	return res, nil
}

// ValidateSettings asks g's validate_settings whether the settings are valid.
func (c *Config) ValidateSettings(ctx context.Context, g Guest) error {
	out, _, err := g.Call(ctx, "validate_settings", c.Settings)
	if err != nil {
		return fmt.Errorf("validate_settings: %w", err)
	}
	var r protocol.SettingsValidationResponse
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("validate_settings: %w: %v (answer %.120q)", ErrInvalidResponse, err, out)
	}
	if !r.Valid {
		msg := "no reason given"
		if r.Message != nil && *r.Message != "" {
			msg = *r.Message
		}
		return fmt.Errorf("%w: %s", ErrInvalidSettings, msg)
	}
	return nil
}

// payloads are ValidationRequest buffers reused from one waPC evaluation to
// the next (the request's size in garbage per request otherwise); buffers
// grown past maxPooledPayload are left to the collector.
var payloads = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledPayload = 256 << 10

// appendPayload appends the ValidationRequest to dst: the request's bytes and
// the settings spliced into {"request":...,"settings":...}, nothing decoded.
func (c *Config) appendPayload(dst, request []byte) []byte {
	payload := slices.Grow(dst, len(request)+len(c.Settings)+26)
	payload = append(payload, `{"request":`...)
	payload = append(payload, request...)
	payload = append(payload, `,"settings":`...)
	payload = append(payload, c.Settings...)
	return append(payload, '}')
}

// decide turns the policy's answer into res.Response and res.Patch.
func (c *Config) decide(res *Result, object, out []byte) error {
	if len(out) > c.MaxResponseBytes {
		return fmt.Errorf("policy %s: %w: the answer is %d bytes, the limit is %d", c.ID, ErrInvalidResponse, len(out), c.MaxResponseBytes)
	}
	// The fast path decodes the answer without encoding/json's pass over
	// mutated_object; on anything unusual, and on every error, the reference
	// path runs on the same answer so that results and errors are its own.
	if object != nil {
		x := answerIndexes.Get().(*fastjson.Index)
		mo, ok := decodeResponseFast(out, &res.Response, x)
		ok = ok && c.answer(res, object, out, false, scanned{x, mo}) == nil
		if cap(x.Len) <= maxPooledPayload {
			answerIndexes.Put(x)
		}
		if ok {
			return nil
		}
	}
	res.Response, res.Patch = protocol.ValidationResponse{}, nil
	return c.answer(res, object, out, true, scanned{})
}

// answerIndexes are the indexes decodeResponseFast fills with mutated_object
// for the diff, reused from one evaluation to the next.
var answerIndexes = sync.Pool{New: func() any { return new(fastjson.Index) }}

// scanned is where decodeResponseFast found mutated_object in the answer
// (at mo[0]:mo[1], indexed by x); mo[1] is 0 when it did not index it.
type scanned struct {
	x  *fastjson.Index
	mo [2]int
}

// answer checks a decoded ValidationResponse and diffs its mutated_object
// against object. With decode set it first decodes out with json.Unmarshal
// (the reference); without, res.Response was decoded by decodeResponseFast.
func (c *Config) answer(res *Result, object, out []byte, decode bool, sc scanned) error {
	if decode {
		if err := json.Unmarshal(out, &res.Response); err != nil {
			return fmt.Errorf("policy %s: %w: not a ValidationResponse: %v (answer %.120q)", c.ID, ErrInvalidResponse, err, out)
		}
	}
	if mo := bytes.TrimSpace(res.Response.MutatedObject); len(mo) > 0 && string(mo) != "null" {
		if mo[0] != '{' {
			return fmt.Errorf("policy %s: %w: mutated_object must be a JSON object, got %.60s", c.ID, ErrInvalidResponse, mo)
		}
		if !res.Response.Accepted {
			return fmt.Errorf("policy %s: %w: a rejection must not carry a mutated_object", c.ID, ErrInvalidResponse)
		}
		if object != nil {
			var patch []byte
			var err error
			if sc.mo[1] > 0 {
				patch, err = admission.DiffIndexed(object, out, sc.x, sc.mo[0], sc.mo[1])
			} else {
				patch, err = admission.Diff(object, mo)
			}
			if err != nil {
				return fmt.Errorf("policy %s: %w: mutated_object: %v", c.ID, ErrInvalidResponse, err)
			}
			res.Patch = patch
		}
	} else {
		res.Response.MutatedObject = nil
	}
	return nil
}
