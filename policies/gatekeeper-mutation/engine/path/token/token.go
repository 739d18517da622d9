// Package token scans a Gatekeeper mutation location into tokens, like
// Gatekeeper's pkg/mutation/path/token.
//
// It must NOT know about the parse tree or about objects.
package token

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Type is a token's type.
type Type string

// Token types.
const (
	ERROR     Type = "ERROR"
	EOF       Type = "EOF"
	IDENT     Type = "IDENT"
	INT       Type = "INT"
	LBRACKET  Type = "LBRACKET"
	RBRACKET  Type = "RBRACKET"
	SEPARATOR Type = "SEPARATOR"
	GLOB      Type = "GLOB"
	COLON     Type = "COLON"
)

// Token is one token.
type Token struct {
	Type    Type
	Literal string
}

func (t Token) String() string { return string(t.Type) + ": " + strconv.Quote(t.Literal) }

const eof = rune(-1)

// Scanner errors.
var (
	ErrUnterminatedString = errors.New("unterminated string")
	ErrInvalidCharacter   = errors.New("invalid character")
)

// ScanError locates a scan error.
type ScanError struct {
	Inner    error
	Position int
}

func (e ScanError) Error() string {
	return "error at position " + strconv.Itoa(e.Position) + ": " + e.Inner.Error()
}

// Unwrap returns the inner error.
func (e ScanError) Unwrap() error { return e.Inner }

// Scanner splits a location into tokens.
type Scanner struct {
	input   string
	pos     int
	readPos int
	ch      rune
	err     error
}

// NewScanner starts scanning input.
func NewScanner(input string) *Scanner {
	s := &Scanner{input: input}
	s.read()
	return s
}

// Err is the scanner's last error.
func (s *Scanner) Err() error { return s.err }

// Next returns the next token.
func (s *Scanner) Next() Token {
	var err error
	tok := Token{Type: ERROR}
	s.skipWhitespace()
	switch {
	case isDigit(s.ch):
		if tok.Literal, err = s.readInt(); err == nil {
			tok.Type = INT
		}
	case isAlphaNum(s.ch):
		if tok.Literal, err = s.readIdent(); err == nil {
			tok.Type = IDENT
		}
	default:
		switch s.ch {
		case eof:
			tok = Token{Type: EOF}
		case '.':
			tok = Token{Type: SEPARATOR, Literal: "."}
		case '[':
			tok = Token{Type: LBRACKET, Literal: "["}
		case ']':
			tok = Token{Type: RBRACKET, Literal: "]"}
		case '*':
			tok = Token{Type: GLOB, Literal: "*"}
		case ':':
			tok = Token{Type: COLON, Literal: ":"}
		case '"', '\'':
			if tok.Literal, err = s.readString(); err == nil {
				tok.Type = IDENT
			}
		default:
			s.setError(ErrInvalidCharacter)
			tok = Token{Type: ERROR, Literal: string(s.ch)}
		}
		s.read()
	}
	return tok
}

func (s *Scanner) read() {
	if s.readPos >= len(s.input) {
		s.ch = eof
		s.pos = len(s.input)
		return
	}
	r, w := utf8.DecodeRuneInString(s.input[s.readPos:])
	s.pos = s.readPos
	s.readPos += w
	s.ch = r
}

func (s *Scanner) readString() (string, error) {
	quote := s.ch
	var out strings.Builder
	for {
		s.read()
		switch s.ch {
		case quote:
			return out.String(), nil
		case '\\':
			s.read()
			if s.ch == eof {
				continue
			}
			out.WriteRune(s.ch)
		case eof:
			s.setError(ErrUnterminatedString)
			return out.String(), s.err
		default:
			out.WriteRune(s.ch)
		}
	}
}

func (s *Scanner) readIdent() (string, error) {
	start := s.pos
	for isAlphaNum(s.ch) {
		s.read()
	}
	return s.input[start:s.pos], s.err
}

func (s *Scanner) readInt() (string, error) {
	start := s.pos
	for isDigit(s.ch) {
		s.read()
	}
	return s.input[start:s.pos], s.err
}

func (s *Scanner) setError(err error) {
	s.err = ScanError{Inner: err, Position: s.pos}
}

func isAlphaNum(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '-'
}

func isDigit(r rune) bool { return '0' <= r && r <= '9' }

func (s *Scanner) skipWhitespace() {
	for s.ch == ' ' || s.ch == '\t' || s.ch == '\r' || s.ch == '\n' {
		s.read()
	}
}
