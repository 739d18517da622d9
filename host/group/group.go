package group

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on expressions, so a configuration cannot make parsing or
// evaluation expensive.
const (
	MaxLength = 4096
	MaxDepth  = 64
)

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("group expression syntax error")

// Expr is a parsed expression. Its concrete types are Call, Not, And, Or and
// Const.
type Expr interface {
	String() string
	isExpr()
}

// Call evaluates the member Name.
type Call struct{ Name string }

// Not negates X.
type Not struct{ X Expr }

// And is true when both sides are; Right is evaluated only if Left is true.
type And struct{ Left, Right Expr }

// Or is true when either side is; Right is evaluated only if Left is false.
type Or struct{ Left, Right Expr }

// Const is the literal true or false.
type Const bool

func (Call) isExpr()  {}
func (Not) isExpr()   {}
func (And) isExpr()   {}
func (Or) isExpr()    {}
func (Const) isExpr() {}

func (c Call) String() string { return c.Name + "()" }
func (n Not) String() string  { return "!" + n.X.String() }
func (a And) String() string  { return "(" + a.Left.String() + " && " + a.Right.String() + ")" }
func (o Or) String() string   { return "(" + o.Left.String() + " || " + o.Right.String() + ")" }
func (c Const) String() string {
	if c {
		return "true"
	}
	return "false"
}

// SyntaxError reports where an expression is malformed.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.Msg, e.Offset)
}

func (e *SyntaxError) Unwrap() error { return ErrSyntax }

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tLParen
	tRParen
	tAnd
	tOr
	tNot
)

func (k tokKind) String() string {
	return [...]string{"end of expression", "name", "'('", "')'", "'&&'", "'||'", "'!'"}[k]
}

type token struct {
	kind tokKind
	text string
	pos  int
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdent(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			toks = append(toks, token{tLParen, "(", i})
			i++
		case c == ')':
			toks = append(toks, token{tRParen, ")", i})
			i++
		case c == '!':
			toks = append(toks, token{tNot, "!", i})
			i++
		case c == '&' || c == '|':
			if i+1 >= len(s) || s[i+1] != c {
				return nil, &SyntaxError{i, fmt.Sprintf("expected %q", string([]byte{c, c}))}
			}
			k := tAnd
			if c == '|' {
				k = tOr
			}
			toks = append(toks, token{k, s[i : i+2], i})
			i += 2
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			toks = append(toks, token{tIdent, s[i:j], i})
			i = j
		default:
			return nil, &SyntaxError{i, fmt.Sprintf("unexpected character %q", rune(c))}
		}
	}
	return append(toks, token{tEOF, "", len(s)}), nil
}

type parser struct {
	toks  []token
	i     int
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

// Parse parses an expression. Grammar:
//
//	expr  = and { "||" and }
//	and   = unary { "&&" unary }
//	unary = "!" unary | "(" expr ")" | name "(" ")" | "true" | "false"
func Parse(s string) (Expr, error) {
	if len(s) > MaxLength {
		return nil, &SyntaxError{MaxLength, fmt.Sprintf("expression longer than %d bytes", MaxLength)}
	}
	if strings.TrimSpace(s) == "" {
		return nil, &SyntaxError{0, "empty expression"}
	}
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	e, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, &SyntaxError{t.pos, fmt.Sprintf("unexpected %s %q", t.kind, t.text)}
	}
	return e, nil
}

func (p *parser) or() (Expr, error) {
	l, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tOr {
		p.next()
		r, err := p.and()
		if err != nil {
			return nil, err
		}
		l = Or{l, r}
	}
	return l, nil
}

func (p *parser) and() (Expr, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tAnd {
		p.next()
		r, err := p.unary()
		if err != nil {
			return nil, err
		}
		l = And{l, r}
	}
	return l, nil
}

func (p *parser) unary() (Expr, error) {
	p.depth++
	defer func() { p.depth-- }()
	t := p.next()
	if p.depth > MaxDepth {
		return nil, &SyntaxError{t.pos, fmt.Sprintf("expression nested deeper than %d", MaxDepth)}
	}
	switch t.kind {
	case tNot:
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return Not{x}, nil
	case tLParen:
		e, err := p.or()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tRParen {
			return nil, &SyntaxError{c.pos, fmt.Sprintf("expected ')', found %s", c.kind)}
		}
		return e, nil
	case tIdent:
		if p.peek().kind != tLParen {
			switch t.text {
			case "true":
				return Const(true), nil
			case "false":
				return Const(false), nil
			}
			return nil, &SyntaxError{p.peek().pos, fmt.Sprintf("expected '(' after %q: members are called as %s()", t.text, t.text)}
		}
		p.next()
		if c := p.next(); c.kind != tRParen {
			return nil, &SyntaxError{c.pos, fmt.Sprintf("expected ')' after %s(: member calls take no arguments", t.text)}
		}
		return Call{t.text}, nil
	default:
		return nil, &SyntaxError{t.pos, fmt.Sprintf("unexpected %s", t.kind)}
	}
}

// Calls returns the member names an expression calls, in order of first
// appearance, without duplicates.
func Calls(e Expr) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(Expr)
	walk = func(e Expr) {
		switch e := e.(type) {
		case Call:
			if !seen[e.Name] {
				seen[e.Name] = true
				out = append(out, e.Name)
			}
		case Not:
			walk(e.X)
		case And:
			walk(e.Left)
			walk(e.Right)
		case Or:
			walk(e.Left)
			walk(e.Right)
		}
	}
	walk(e)
	return out
}

// Eval evaluates e, calling member for each member whose value is needed,
// left to right, short-circuiting && and ||. A member is called at most once;
// later references reuse its value. The first error from member stops
// evaluation and is returned.
func Eval(e Expr, member func(name string) (bool, error)) (bool, error) {
	memo := map[string]bool{}
	var eval func(Expr) (bool, error)
	eval = func(e Expr) (bool, error) {
		switch e := e.(type) {
		case Const:
			return bool(e), nil
		case Call:
			if v, ok := memo[e.Name]; ok {
				return v, nil
			}
			v, err := member(e.Name)
			if err != nil {
				return false, err
			}
			memo[e.Name] = v
			return v, nil
		case Not:
			v, err := eval(e.X)
			return !v, err
		case And:
			l, err := eval(e.Left)
			if err != nil || !l {
				return false, err
			}
			return eval(e.Right)
		case Or:
			l, err := eval(e.Left)
			if err != nil || l {
				return l, err
			}
			return eval(e.Right)
		}
		return false, fmt.Errorf("group: unknown expression node %T", e)
	}
	return eval(e)
}
