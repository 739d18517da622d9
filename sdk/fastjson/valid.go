package fastjson

import "math"

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// Valid reports whether data is one JSON value (surrounding whitespace
// allowed), with json.Valid's rules: RFC 8259 syntax, strings may hold
// invalid UTF-8, at most 10000 levels of nesting.
func Valid(data []byte) bool {
	s := scanner{b: data}
	_, _, ok := s.document()
	return ok
}

// Index is what Parse records of a document, for code that walks the
// document's bytes itself (the host's JSON Patch diff): Len[i] is the length
// of the value or object key that starts at offset i, so that skipping a
// value of any size is one lookup, and Escaped[i] tells whether the string
// that starts there holds a backslash or a byte from 0x80 on (whether its
// text may differ from its bytes). The entries at other offsets are stale.
// An Index is reused from one Scan to the next; it must not be used by two
// goroutines at once.
type Index struct {
	Len     []int32
	Escaped []bool
}

// Scan checks that data is one JSON value (surrounding whitespace allowed)
// with Valid's rules and indexes it, in one pass; start and end are the
// value's offsets. ok is false for anything else (empty, trailing data, a
// syntax error, nesting deeper than 10000, more than math.MaxInt32 bytes).
func (x *Index) Scan(data []byte) (start, end int, ok bool) {
	if len(data) > math.MaxInt32 {
		return 0, 0, false
	}
	s := x.scanner(data)
	return s.document()
}

// ScanValue checks the one JSON value that starts at data[i] (not at
// whitespace) with Valid's rules and indexes it into x as Scan indexes a
// document; end is the offset right after it, and what follows is not looked
// at. ok is false for a syntax error, nesting deeper than 10000, an i outside
// data, or more than math.MaxInt32 bytes. A decoder that meets a large value
// inside a document (the host, a policy's mutated_object in its answer)
// checks and indexes it in one pass instead of skipping it and scanning it
// again.
func (x *Index) ScanValue(data []byte, i int) (end int, ok bool) {
	if len(data) > math.MaxInt32 || i < 0 || i >= len(data) {
		return 0, false
	}
	s := x.scanner(data)
	return s.value(i, 0)
}

// scanner sizes x for data (grown as needed, never shrunk) and returns a
// scanner that fills it.
func (x *Index) scanner(data []byte) scanner {
	if cap(x.Len) < len(data) {
		x.Len = make([]int32, len(data))
	}
	if cap(x.Escaped) < len(data) {
		x.Escaped = make([]bool, len(data))
	}
	x.Len, x.Escaped = x.Len[:len(data)], x.Escaped[:len(data)]
	return scanner{b: data, lens: x.Len, esc: x.Escaped}
}

// scanner checks the syntax of b. When lens is not nil it records there the
// length of every value and key it checks, at the offset where it starts;
// when esc is not nil, whether each string holds a backslash or a byte from
// 0x80 on.
type scanner struct {
	b    []byte
	lens []int32
	esc  []bool
	// escaped is what esc records of the last string checked.
	escaped bool
}

// document checks that b is one value with only whitespace around it.
func (s *scanner) document() (start, end int, ok bool) {
	start = SkipSpace(s.b, 0)
	end, ok = s.value(start, 0)
	if !ok || SkipSpace(s.b, end) != len(s.b) {
		return 0, 0, false
	}
	return start, end, true
}

// value checks the value at b[i] and returns its end.
func (s *scanner) value(i, depth int) (int, bool) {
	b := s.b
	if i >= len(b) {
		return 0, false
	}
	var end int
	var ok bool
	switch c := b[i]; {
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return 0, false
		}
		end, ok = s.container(i, depth)
	case c == '"':
		end, ok = s.str(i)
	case c == 't':
		end, ok = literalEnd(b, i, "true")
	case c == 'f':
		end, ok = literalEnd(b, i, "false")
	case c == 'n':
		end, ok = literalEnd(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		end, ok = numberEnd(b, i)
	}
	if !ok {
		return 0, false
	}
	if s.lens != nil {
		s.lens[i] = int32(end - i)
	}
	return end, true
}

// container checks the object or the array whose '{' or '[' is at b[i].
func (s *scanner) container(i, depth int) (int, bool) {
	b := s.b
	object, close := b[i] == '{', byte(']')
	if object {
		close = '}'
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == close {
		return i + 1, true
	}
	for {
		var ok bool
		if object {
			if i >= len(b) || b[i] != '"' {
				return 0, false
			}
			var end int
			if end, ok = s.str(i); !ok {
				return 0, false
			}
			if s.lens != nil {
				s.lens[i] = int32(end - i)
			}
			i = SkipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return 0, false
			}
			i = SkipSpace(b, i+1)
		}
		if i, ok = s.value(i, depth+1); !ok {
			return 0, false
		}
		i = SkipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		if b[i] == close {
			return i + 1, true
		}
		if b[i] != ',' {
			return 0, false
		}
		i = SkipSpace(b, i+1)
	}
}

// stopsString marks the bytes a string scan must look at: the closing
// quote, a backslash, control characters (invalid) and the bytes from 0x80
// on (recorded in esc).
var stopsString = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c < 0x20 || c >= 0x80 || c == '"' || c == '\\'
	}
	return t
}()

// str returns the offset after the closing quote of the string at b[i].
func (s *scanner) str(i int) (int, bool) {
	b := s.b
	start := i
	escaped := false
	for i++; ; i++ {
		for i+8 <= len(b) {
			// le64(b, i), written out: TinyGo calls even a small function,
			// and this loop runs once per eight bytes of every string.
			r := b[i : i+8]
			x := uint64(r[0]) | uint64(r[1])<<8 | uint64(r[2])<<16 | uint64(r[3])<<24 |
				uint64(r[4])<<32 | uint64(r[5])<<40 | uint64(r[6])<<48 | uint64(r[7])<<56
			if !plainRun(x) {
				break
			}
			i += 8
		}
		for i < len(b) && !stopsString[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '"':
			if s.esc != nil {
				s.esc[start] = escaped
			}
			s.escaped = escaped
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c >= 0x80:
			escaped = true
		case c == '\\':
			escaped = true
			i++
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if getu4(b[i-1:]) < 0 {
					return 0, false
				}
				i += 4
			default:
				return 0, false
			}
		}
	}
}

func literalEnd(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || !equalBytes(b[i:i+len(lit)], lit) { // not string(...) != lit: TinyGo allocates it
		return 0, false
	}
	return i + len(lit), true
}

// numberEnd returns the end of the number at b[i] (RFC 8259 grammar).
func numberEnd(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
			return 0, false
		}
	}
	return i, true
}

var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// SkipSpace returns the offset of the first byte from b[i] on that is not
// JSON whitespace (len(b) when there is none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && isSpace[b[i]] {
		// Indentation: eight spaces at a time.
		if b[i] == ' ' && i+8 <= len(b) && le64(b, i) == 0x2020202020202020 {
			i += 8
			continue
		}
		i++
	}
	return i
}

// ScanString checks the JSON string that starts at b[i] (a quote) with
// Valid's rules: end is the offset after its closing quote, and escaped
// tells whether it holds a backslash or a byte from 0x80 on (whether its
// text, Unquote's, may differ from its bytes). ok is false when b[i] is not
// a quote or the string is malformed (a bad escape, a control character) or
// does not end. A decoder of its own (one that builds values as it reads)
// checks and decodes its strings with ScanString and AppendUnquote.
func ScanString(b []byte, i int) (end int, escaped, ok bool) {
	if i < 0 || i >= len(b) || b[i] != '"' {
		return 0, false, false
	}
	s := scanner{b: b}
	if end, ok = s.str(i); !ok {
		return 0, false, false
	}
	return end, s.escaped, true
}

// StringEnd returns the offset after the string starting at b[i] (a quote),
// or -1 when it does not end. Escapes are skipped, not checked (Index.Scan
// checks them); runs of eight bytes without a quote or a backslash are
// passed at once.
func StringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		for i+8 <= len(b) {
			if x := le64(b, i); hasByte(x, '"') || hasByte(x, '\\') {
				break
			}
			i += 8
		}
		if i >= len(b) {
			break
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	return -1
}

// le64 is the eight bytes b[i:i+8] as a little-endian number, as
// binary.LittleEndian.Uint64(b[i:]) is (Go's compiler makes both one load).
func le64(b []byte, i int) uint64 {
	b = b[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// The SWAR tests below look at eight bytes at once (x is eight bytes, little
// endian).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasByte reports whether one of the bytes of x is c.
func hasByte(x uint64, c byte) bool {
	v := x ^ (ones * uint64(c))
	return (v-ones)&^v&highs != 0
}

// plainRun reports whether none of the eight bytes of x stops a string scan:
// no quote, backslash, control character or byte from 0x80 on.
func plainRun(x uint64) bool {
	return x&highs == 0 && (x-ones*0x20)&^x&highs == 0 && !hasByte(x, '"') && !hasByte(x, '\\')
}
