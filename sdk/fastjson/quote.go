package fastjson

import (
	"unicode/utf16"
	"unicode/utf8"
)

// unquote decodes a string body (the bytes between the quotes) as
// encoding/json does: escapes resolved, a surrogate pair combined, a lone
// surrogate and each invalid UTF-8 byte replaced by U+FFFD.
func unquote(body []byte) []byte {
	return appendUnquote(make([]byte, 0, len(body)), body)
}

// appendUnquote appends unquote(body) to out.
func appendUnquote(out, body []byte) []byte {
	for r := 0; r < len(body); {
		c := body[r]
		switch {
		case c == '\\':
			if r+1 >= len(body) {
				return out
			}
			r++
			switch body[r] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				rr := getu4(body[r-1:])
				if rr < 0 {
					return out
				}
				r += 5
				if utf16.IsSurrogate(rr) {
					rr1 := getu4(body[r:])
					if dec := utf16.DecodeRune(rr, rr1); dec != utf8.RuneError {
						r += 6
						out = utf8.AppendRune(out, dec)
						continue
					}
					rr = utf8.RuneError
				}
				out = utf8.AppendRune(out, rr)
				continue
			default: // '"', '\\', '/'
				out = append(out, body[r])
			}
			r++
		case c < utf8.RuneSelf:
			out = append(out, c)
			r++
		default:
			rr, size := utf8.DecodeRune(body[r:])
			out = utf8.AppendRune(out, rr)
			r += size
		}
	}
	return out
}

// Unquote is the text of the JSON string q (quotes included, its syntax
// checked, by Scan or Parse), decoded as encoding/json decodes it: q's own
// bytes between the quotes when it has no escapes and is valid UTF-8.
func Unquote(q []byte) []byte {
	if len(q) < 2 {
		return nil
	}
	body := q[1 : len(q)-1]
	if plain(body) {
		return body
	}
	return unquote(body)
}

// AppendUnquote appends the text of the JSON string q to dst, decoded as
// Unquote decodes it; q (quotes included) is checked, by ScanString, Scan
// or Parse. A decoder that keeps one buffer for the strings it decodes uses
// it instead of Unquote, which allocates.
func AppendUnquote(dst, q []byte) []byte {
	if len(q) < 2 {
		return dst
	}
	return appendUnquote(dst, q[1:len(q)-1])
}

// getu4 decodes \uXXXX at the start of b, or returns -1.
func getu4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

const hex = "0123456789abcdef"

// marshalPlain marks the bytes json.Marshal copies into a string as they
// are: printable ASCII but the quote, the backslash, <, > and & (escaped as
// \u003c, \u003e, \u0026 to be HTML-safe). The bytes from 0x80 on are
// decoded: invalid UTF-8 becomes \ufffd, U+2028 and U+2029 are escaped
// (JSONP-safe), the rest is copied.
var marshalPlain = plainBytes(`"\<>&`, false)

// minimalPlain marks the bytes AppendQuoteMinimal copies as they are: all
// but the quote, the backslash and the control characters.
var minimalPlain = plainBytes(`"\`, true)

// plainBytes marks the printable ASCII bytes but those of special, and the
// bytes from 0x80 on when high.
func plainBytes(special string, high bool) (t [256]bool) {
	for c := 0x20; c < 0x100; c++ {
		t[c] = c < utf8.RuneSelf || high
	}
	for i := 0; i < len(special); i++ {
		t[special[i]] = false
	}
	return t
}

// AppendQuote appends s as a JSON string, escaped exactly as json.Marshal
// escapes it (<, > and & as \u003c, \u003e, \u0026; \b and \f short;
// U+2028 and U+2029 escaped; invalid UTF-8 as \ufffd). Output that must be
// byte-identical to encoding/json's (a JSON Patch, an object Kubernetes'
// own code encodes) uses it.
func AppendQuote(dst []byte, s string) []byte { return appendQuote(dst, s) }

// AppendQuoteBytes is AppendQuote of the text held in s.
func AppendQuoteBytes(dst []byte, s []byte) []byte { return appendQuote(dst, s) }

// Quote is AppendQuote(nil, s).
func Quote(s string) []byte { return AppendQuote(nil, s) }

func appendQuote[S string | []byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; ; {
		for i < len(s) && marshalPlain[s[i]] {
			i++
		}
		if i >= len(s) {
			break
		}
		if b := s[i]; b < utf8.RuneSelf {
			dst = appendEscape(append(dst, s[start:i]...), b, true)
			i++
			start = i
			continue
		}
		// Decode the rune (at most four bytes converted, which does not
		// allocate).
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendQuoteMinimal appends s as a JSON string escaping only what RFC 8259
// requires: the quote and the backslash as \" and \\, \n, \r and \t
// short, the other control characters as \u00xx (\b as \u0008); every
// other byte, invalid UTF-8 included, is copied as it is. It is for text
// that a JSON decoder reads back (a guest's answer, which the host
// decodes): the same value as AppendQuote's once decoded, for less work per
// byte (no UTF-8 decoding), which counts under TinyGo.
func AppendQuoteMinimal(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if b := s[i]; !minimalPlain[b] {
			dst = appendEscape(append(dst, s[start:i]...), b, false)
			start = i + 1
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscape appends the escape of the ASCII byte b: \" \\ \n \r \t,
// \b and \f when shortBF (json.Marshal since Go 1.22), else \u00xx.
func appendEscape(dst []byte, b byte, shortBF bool) []byte {
	switch {
	case b == '\\' || b == '"':
		return append(dst, '\\', b)
	case b == '\n':
		return append(dst, '\\', 'n')
	case b == '\r':
		return append(dst, '\\', 'r')
	case b == '\t':
		return append(dst, '\\', 't')
	case b == '\b' && shortBF:
		return append(dst, '\\', 'b')
	case b == '\f' && shortBF:
		return append(dst, '\\', 'f')
	}
	return append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
}
