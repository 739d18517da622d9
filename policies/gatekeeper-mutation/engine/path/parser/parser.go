// Package parser parses a Gatekeeper mutation location
// (`spec.containers[name: foo].image`) into a Path, like Gatekeeper's
// pkg/mutation/path/parser.
//
// It must NOT know about objects or mutators.
package parser

import (
	"errors"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/token"
)

// Parse errors.
var (
	ErrTrailingSeparator = errors.New("trailing separators are forbidden")
	ErrUnexpectedToken   = errors.New("unexpected token")
	ErrInvalidInteger    = errors.New("invalid integer")
)

// NodeType says whether a Node is an Object field or a keyed List element.
type NodeType string

// Node types.
const (
	ListNode   NodeType = "List"
	ObjectNode NodeType = "Object"
)

// Node is one segment of a Path: Reference is set for an ObjectNode; a
// ListNode has KeyField and either Glob or KeyValue (a string, or an int64
// when IntKey).
type Node struct {
	Type      NodeType
	Reference string
	KeyField  string
	KeyString string
	KeyInt    int64
	IntKey    bool
	Glob      bool
}

// Equal reports whether two nodes are the same (reflect.DeepEqual in Gatekeeper).
func (n Node) Equal(o Node) bool { return n == o }

// HasKey reports whether a non-glob list node has a key value.
func (n Node) HasKey() bool { return n.Type == ListNode && !n.Glob }

// Path is a parsed location.
type Path struct {
	Nodes []Node
}

func (n Node) String() string {
	if n.Type == ObjectNode {
		return quote(n.Reference)
	}
	key := quote(n.KeyField)
	if n.Glob {
		return "[" + key + ": *]"
	}
	if n.IntKey {
		return "[" + key + ": " + strconv.FormatInt(n.KeyInt, 10) + "]"
	}
	return "[" + key + ": " + quote(n.KeyString) + "]"
}

func (p Path) String() string {
	var b strings.Builder
	for i, n := range p.Nodes {
		if n.Type == ObjectNode && i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(n.String())
	}
	return b.String()
}

func quote(s string) string {
	if len(s) == 0 {
		return `""`
	}
	if strings.ContainsAny(s, "'\"\t\n \\*[]:.") || strings.ContainsAny(s[0:1], "0123456789") {
		s = strings.ReplaceAll(s, `\`, `\\`)
		s = strings.ReplaceAll(s, `"`, `\"`)
		return `"` + s + `"`
	}
	return s
}

type parser struct {
	scanner   *token.Scanner
	curToken  token.Token
	peekToken token.Token
	err       error
}

// Parse parses a location.
func Parse(input string) (Path, error) {
	p := &parser{scanner: token.NewScanner(input)}
	p.curToken = p.scanner.Next()
	p.peekToken = p.scanner.Next()
	return p.parse()
}

func (p *parser) next() {
	p.curToken = p.peekToken
	p.peekToken = p.scanner.Next()
}

func (p *parser) expect(t token.Type) bool {
	if p.peekToken.Type == t {
		p.next()
		return true
	}
	return false
}

func unexpected(msg string) error {
	return wrapErr{msg: ErrUnexpectedToken.Error() + ": " + msg, inner: ErrUnexpectedToken}
}

type wrapErr struct {
	msg   string
	inner error
}

func (e wrapErr) Error() string { return e.msg }
func (e wrapErr) Unwrap() error { return e.inner }

func (p *parser) parse() (Path, error) {
	root := Path{}
	for p.curToken.Type == token.IDENT && p.err == nil {
		root.Nodes = append(root.Nodes, Node{Type: ObjectNode, Reference: p.curToken.Literal})
		if p.expect(token.LBRACKET) {
			if node, ok := p.parseList(); ok {
				root.Nodes = append(root.Nodes, node)
			}
		}
		switch {
		case p.expect(token.SEPARATOR):
			if p.peekToken.Type == token.EOF {
				p.setError(ErrTrailingSeparator)
				return Path{}, p.err
			}
			p.next()
		case p.expect(token.EOF):
		default:
			p.setError(unexpected("expected '.' or eof, got: " + p.peekToken.String()))
			return Path{}, p.err
		}
	}
	if p.curToken.Type != token.EOF {
		p.setError(unexpected("expected field name or eof, got: " + p.curToken.String()))
	}
	if p.err != nil {
		return Path{}, p.err
	}
	return root, nil
}

func (p *parser) parseList() (Node, bool) {
	out := Node{Type: ListNode}
	if !p.expect(token.IDENT) {
		p.setError(unexpected("expected keyField in listSpec, got: " + p.peekToken.String()))
		return out, false
	}
	out.KeyField = p.curToken.Literal
	if !p.expect(token.COLON) {
		p.setError(unexpected("expected ':' following keyField " + out.KeyField + ", got: " + p.peekToken.String()))
		return out, false
	}
	switch {
	case p.expect(token.GLOB):
		out.Glob = true
	case p.expect(token.IDENT):
		out.KeyString = p.curToken.Literal
	case p.expect(token.INT):
		val, err := parseInt64(p.curToken.Literal)
		if err != nil {
			p.setError(wrapErr{msg: err.Error() + ": parsing key value for key: " + out.KeyField, inner: ErrInvalidInteger})
			return out, false
		}
		out.KeyInt = val
		out.IntKey = true
	default:
		p.setError(unexpected("expected key value or glob in listSpec, got: " + p.peekToken.String()))
		return out, false
	}
	if !p.expect(token.RBRACKET) {
		p.setError(unexpected("expected ']' following listSpec, got: " + p.peekToken.String()))
		return out, false
	}
	return out, true
}

func (p *parser) setError(err error) {
	if p.err == nil {
		p.err = err
	}
}

func parseInt64(s string) (int64, error) {
	var result int64
	for _, d := range s {
		if d < '0' || d > '9' {
			return 0, errors.New("invalid integer: unexpected digit: " + string(d))
		}
		result = result*10 + int64(d-'0')
		if result < 0 {
			return 0, errors.New("invalid integer: overflow in integer string: " + s)
		}
	}
	return result, nil
}
