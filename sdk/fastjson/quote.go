package fastjson

import (
	"unicode/utf16"
	"unicode/utf8"
)

// unquote decodes a string body (the bytes between the quotes) as
// encoding/json does: escapes resolved, a surrogate pair combined, a lone
// surrogate and each invalid UTF-8 byte replaced by U+FFFD.
func unquote(body []byte) []byte {
	out := make([]byte, 0, len(body))
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

// AppendQuote appends s as a JSON string, escaped exactly as json.Marshal
// escapes it (<, > and & as \u003c, \u003e, \u0026; U+2028 and U+2029
// escaped; invalid UTF-8 as \ufffd).
func AppendQuote(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Quote is AppendQuote(nil, s).
func Quote(s string) []byte { return AppendQuote(nil, s) }
