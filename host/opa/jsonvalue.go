package opa

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/ast"
)

// errJSON: a builtin argument the module dumped is not JSON (it always is).
var errJSON = errors.New("malformed JSON from opa_json_dump")

// jsonValue converts the JSON that opa_json_dump writes into an ast.Value
// directly. ast.ValueFromReader goes through encoding/json's Decoder into
// interface{} values and then converts those: three times the time and the
// garbage, for arguments that are mostly a few short strings. Numbers keep
// their text (ast.Number), as ast.ValueFromReader keeps them.
func jsonValue(b []byte) (ast.Value, error) {
	p := jsonParser{b: b}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return nil, fmt.Errorf("%w: trailing bytes at offset %d", errJSON, p.i)
	}
	return v, nil
}

type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) fail() error {
	return fmt.Errorf("%w: at offset %d", errJSON, p.i)
}

func (p *jsonParser) value() (ast.Value, error) {
	p.space()
	if p.i >= len(p.b) {
		return nil, p.fail()
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		var terms [][2]*ast.Term
		p.space()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return ast.NewObject(), nil
		}
		for {
			p.space()
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, p.fail()
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.space()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, p.fail()
			}
			p.i++
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			terms = append(terms, [2]*ast.Term{ast.NewTerm(k), ast.NewTerm(v)})
			p.space()
			if p.i >= len(p.b) {
				return nil, p.fail()
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] != '}' {
				return nil, p.fail()
			}
			p.i++
			return ast.NewObject(terms...), nil
		}
	case c == '[':
		p.i++
		var terms []*ast.Term
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return ast.NewArray(), nil
		}
		for {
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			terms = append(terms, ast.NewTerm(v))
			p.space()
			if p.i >= len(p.b) {
				return nil, p.fail()
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] != ']' {
				return nil, p.fail()
			}
			p.i++
			return ast.NewArray(terms...), nil
		}
	case c == '"':
		return p.str()
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []struct {
			s string
			v ast.Value
		}{{"true", ast.Boolean(true)}, {"false", ast.Boolean(false)}, {"null", ast.Null{}}} {
			if len(p.b)-p.i >= len(lit.s) && string(p.b[p.i:p.i+len(lit.s)]) == lit.s {
				p.i += len(lit.s)
				return lit.v, nil
			}
		}
		return nil, p.fail()
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		for p.i < len(p.b) {
			c := p.b[p.i]
			if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
				p.i++
				continue
			}
			break
		}
		num := json.Number(p.b[start:p.i])
		if last := num[len(num)-1]; last < '0' || last > '9' {
			return nil, fmt.Errorf("%w: number %q", errJSON, string(num))
		}
		return ast.Number(num), nil
	}
	return nil, p.fail()
}

// str reads a string; one of plain ASCII without escapes is sliced, any
// other is left to encoding/json (escapes, and invalid UTF-8 it replaces).
func (p *jsonParser) str() (ast.String, error) {
	start := p.i
	p.i++
	escaped := false
	for p.i < len(p.b) {
		if p.b[p.i] >= 0x80 || p.b[p.i] < 0x20 {
			escaped = true
		}
		switch p.b[p.i] {
		case '\\':
			escaped = true
			p.i += 2
			continue
		case '"':
			p.i++
			if !escaped {
				return ast.String(p.b[start+1 : p.i-1]), nil
			}
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return "", fmt.Errorf("%w: %v", errJSON, err)
			}
			return ast.String(s), nil
		}
		p.i++
	}
	return "", p.fail()
}
