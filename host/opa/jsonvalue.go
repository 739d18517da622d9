package opa

import (
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/ast"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// errJSON: a builtin argument the module dumped is not JSON (it always is).
var errJSON = errors.New("malformed JSON from opa_json_dump")

// jsonValue converts the JSON that opa_json_dump writes into an ast.Value
// directly, through sdk/fastjson (the one JSON scanner and string decoder of
// the host and the SDK). ast.ValueFromReader goes through encoding/json's
// Decoder into interface{} values and then converts those: three times the
// time and the garbage, for arguments that are mostly a few short strings.
// Numbers keep their text (ast.Number), as ast.ValueFromReader keeps them.
func jsonValue(b []byte) (ast.Value, error) {
	v, err := fastjson.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errJSON, err)
	}
	return astValue(v), nil
}

// astValue converts a value of a parsed (so valid) document.
func astValue(v fastjson.Value) ast.Value {
	switch v.Kind() {
	case fastjson.Object:
		var terms [][2]*ast.Term
		for it := v.Iter(); it.Next(); {
			k, _ := it.Key().Str()
			terms = append(terms, [2]*ast.Term{ast.StringTerm(k), ast.NewTerm(astValue(it.Value()))})
		}
		return ast.NewObject(terms...)
	case fastjson.Array:
		var terms []*ast.Term
		for it := v.Iter(); it.Next(); {
			terms = append(terms, ast.NewTerm(astValue(it.Value())))
		}
		return ast.NewArray(terms...)
	case fastjson.String:
		s, _ := v.Str()
		return ast.String(s)
	case fastjson.Number:
		return ast.Number(v.Raw())
	case fastjson.Bool:
		t, _ := v.Bool()
		return ast.Boolean(t)
	}
	return ast.Null{}
}
