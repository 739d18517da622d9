package opa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sort"
	"strconv"
	"time"

	"github.com/open-policy-agent/opa/ast"
	"github.com/open-policy-agent/opa/topdown"
	"github.com/open-policy-agent/opa/topdown/builtins"
)

// hostBuiltins maps the names of the builtins Kubewarden's host offers (its
// burrego crate) to OPA's implementation: the same name, except two that
// Kubewarden registers without their `time.` prefix. A module that calls
// `time.parse_rfc3339_ns` or `time.date` is therefore refused, as Kubewarden
// refuses it.
var hostBuiltins = map[string]string{
	"trace":                   "trace",
	"sprintf":                 "sprintf",
	"time.now_ns":             "time.now_ns",
	"base64url.encode_no_pad": "base64url.encode_no_pad",
	"urlquery.encode":         "urlquery.encode",
	"urlquery.decode":         "urlquery.decode",
	"urlquery.encode_object":  "urlquery.encode_object",
	"urlquery.decode_object":  "urlquery.decode_object",
	"json.is_valid":           "json.is_valid",
	"json.patch":              "json.patch",
	"yaml.marshal":            "yaml.marshal",
	"yaml.unmarshal":          "yaml.unmarshal",
	"yaml.is_valid":           "yaml.is_valid",
	"hex.encode":              "hex.encode",
	"hex.decode":              "hex.decode",
	"glob.quote_meta":         "glob.quote_meta",
	"regex.split":             "regex.split",
	"regex.template_match":    "regex.template_match",
	"regex.find_n":            "regex.find_n",
	"semver.is_valid":         "semver.is_valid",
	"semver.compare":          "semver.compare",
	"parse_rfc3339_ns":        "time.parse_rfc3339_ns",
	"date":                    "time.date",
}

// Builtins lists the builtins a module may leave to the host, sorted.
func Builtins() []string {
	names := make([]string, 0, len(hostBuiltins))
	for n := range hostBuiltins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// builtin is one host builtin a module refers to by id.
type builtin struct {
	name string
	fn   topdown.BuiltinFunc
}

// resolveBuiltins maps the module's `builtins()` ({name: id}) to
// implementations; it lists every name it has none for.
func resolveBuiltins(ids map[string]int32) (map[int32]builtin, error) {
	out := make(map[int32]builtin, len(ids))
	var missing []string
	for name, id := range ids {
		impl, ok := hostBuiltins[name]
		var fn topdown.BuiltinFunc
		if ok {
			fn = topdown.GetBuiltin(impl)
		}
		switch {
		case !ok || fn == nil:
			missing = append(missing, name)
			continue
		case name == "sprintf":
			fn = kubewardenSprintf(fn)
		case name == "trace":
			fn = nil // handled by the instance: logged
		}
		out[id] = builtin{name: name, fn: fn}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%w: %q (tollgate offers the builtins Kubewarden's host offers: %q)", ErrMissingBuiltins, missing, Builtins())
	}
	return out, nil
}

// kubewardenSprintf is sprintf as Kubewarden's host computes it: every
// number in the argument list is converted to an integer before formatting
// (so "%v" of 2.0 prints 2, and "%d" works on any integral number). A number
// with a fraction cannot be converted: Kubewarden's evaluation fails on it,
// and so does this one.
func kubewardenSprintf(fn topdown.BuiltinFunc) topdown.BuiltinFunc {
	return func(bctx topdown.BuiltinContext, operands []*ast.Term, iter func(*ast.Term) error) error {
		if len(operands) == 2 {
			if arr, ok := operands[1].Value.(*ast.Array); ok {
				conv := make([]*ast.Term, arr.Len())
				for i := range conv {
					t := arr.Elem(i)
					if n, ok := t.Value.(ast.Number); ok {
						r, ok := new(big.Rat).SetString(string(n))
						if !ok || !r.IsInt() {
							return fmt.Errorf("sprintf: argument %d is %s, not an integer (Kubewarden's sprintf converts every number to an integer)", i, n)
						}
						t = ast.NumberTerm(json.Number(r.Num().String()))
					}
					conv[i] = t
				}
				operands = []*ast.Term{operands[0], ast.ArrayTerm(conv...)}
			}
		}
		return fn(bctx, operands, iter)
	}
}

// evalState is what the builtins of one evaluation share: the time
// (time.now_ns is constant within an evaluation, as in OPA) and OPA's
// builtin context, made on the first builtin call.
type evalState struct {
	ctx    context.Context
	now    time.Time
	bctx   *topdown.BuiltinContext
	logger *slog.Logger
	// abort is the message of opa_abort, err the failure of a builtin: the
	// reason the guest trapped.
	abort string
	err   error
}

func (s *evalState) builtinContext() topdown.BuiltinContext {
	if s.bctx == nil {
		s.bctx = &topdown.BuiltinContext{
			Context: s.ctx,
			Time:    ast.NumberTerm(json.Number(strconv.FormatInt(s.now.UnixNano(), 10))),
			Cancel:  topdown.NewCancel(),
			Cache:   builtins.Cache{},
		}
	}
	return *s.bctx
}

// call runs a builtin on JSON arguments and returns its JSON result, or nil
// when the result is undefined. Any error of the builtin fails the
// evaluation (Kubewarden's host does so too; OPA's own SDK would make the
// call undefined instead).
func (s *evalState) call(b builtin, args [][]byte) ([]byte, error) {
	terms := make([]*ast.Term, len(args))
	for i, a := range args {
		v, err := jsonValue(a)
		if err != nil {
			return nil, fmt.Errorf("builtin %s: argument %d: %w", b.name, i, err)
		}
		terms[i] = ast.NewTerm(v)
	}
	if b.fn == nil { // trace
		msg := ""
		if len(terms) > 0 {
			if str, ok := terms[0].Value.(ast.String); ok {
				msg = string(str)
			} else {
				msg = terms[0].String()
			}
		}
		s.logger.DebugContext(s.ctx, "rego trace", "message", msg)
		return []byte("true"), nil
	}
	var out *ast.Term
	err := b.fn(s.builtinContext(), terms, func(t *ast.Term) error {
		out = t
		return nil
	})
	if err != nil {
		var te *topdown.Error
		if errors.As(err, &te) {
			return nil, fmt.Errorf("builtin %s: %s", b.name, te.Message)
		}
		return nil, fmt.Errorf("builtin %s: %w", b.name, err)
	}
	if out == nil {
		return nil, nil
	}
	j, err := ast.JSON(out.Value)
	if err != nil {
		return nil, fmt.Errorf("builtin %s: result: %w", b.name, err)
	}
	return json.Marshal(j)
}
