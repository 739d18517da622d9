package jsonengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
)

// patch runs one mutation on act.object: the new object, or nil when the
// mutation leaves it as it is.
func (e *Engine) patch(ctx context.Context, m *compiledMutation, act *activation) (map[string]any, error) {
	if m.err != nil {
		return nil, m.err
	}
	ev, _, err := act.evaluate(ctx, &m.compiled, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return nil, err
	}
	if ev.err != nil {
		return nil, ev.err
	}
	switch m.patchType {
	case "JSONPatch":
		return applyJSONPatch(ev.val, act.object, act.kind)
	case "ApplyConfiguration":
		return applyConfiguration(ev.val, act.object, act.kind)
	}
	return nil, fmt.Errorf("unsupported patchType %q", m.patchType)
}

// applyJSONPatch is the apiserver's JSON patcher: the CEL list of JSONPatch
// values becomes a JSON patch document (values through protobuf's Value, as
// the apiserver converts them), applied with evanphx/json-patch v4 to the
// object's JSON. A failed "test" operation leaves the object unchanged.
func applyJSONPatch(val interface{ Value() any }, object map[string]any, kind *attrs) (map[string]any, error) {
	lister, ok := val.(traits.Lister)
	if !ok {
		return nil, errors.New("type mismatch: JSONPatchType.expression should evaluate to array")
	}
	ops := jsonpatch.Patch{}
	for it := lister.Iterator(); it.HasNext() == types.True; {
		v := it.Next()
		op, ok := v.(*jsonPatchVal)
		if !ok {
			return nil, fmt.Errorf("type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element of %T", v.Value())
		}
		o := jsonpatch.Operation{}
		o["op"] = raw(strconv.Quote(op.op))
		o["path"] = raw(strconv.Quote(op.path))
		if len(op.from) > 0 {
			o["from"] = raw(strconv.Quote(op.from))
		}
		if op.val != nil {
			if obj, ok := op.val.(*dynamic.ObjectVal); ok {
				if err := obj.CheckTypeNamesMatchFieldPathNames(); err != nil {
					return nil, fmt.Errorf("type mismatch: %w", err)
				}
			}
			pv, err := op.val.ConvertToNative(reflect.TypeOf(&structpb.Value{}))
			if err != nil {
				return nil, fmt.Errorf("JSONPath valueExpression evaluated to a type that could not marshal to JSON: %w", err)
			}
			b, err := json.Marshal(pv)
			if err != nil {
				return nil, fmt.Errorf("JSONPath valueExpression evaluated to a type that could not marshal to JSON: %w", err)
			}
			o["value"] = raw(string(b))
		}
		ops = append(ops, o)
	}
	doc, err := encodeJSON(object)
	if err != nil {
		return nil, fmt.Errorf("failed to create JSON patch: %w", err)
	}
	patched, err := ops.Apply(doc)
	if err != nil {
		if errors.Is(err, jsonpatch.ErrTestFailed) {
			return nil, nil
		}
		return nil, fmt.Errorf("JSON Patch: %w", err)
	}
	out, err := decodeObject(patched)
	if err == nil {
		out, err = roundTripObject(out, kind.group, kind.version, kind.kind, true)
	}
	if err != nil {
		return nil, &statusError{code: 500, message: "Internal error occurred: " + err.Error()}
	}
	return out, nil
}

func raw(s string) *json.RawMessage {
	r := json.RawMessage(s)
	return &r
}

// statusError is an error the apiserver's patchers return as an API status
// (apierrors.NewInternalError): the dispatcher answers with it as it is,
// whatever the failure policy.
type statusError struct {
	code    int32
	message string
}

func (e *statusError) Error() string { return e.message }
