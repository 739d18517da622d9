package jsonv

import "unsafe"

// Field is one member of an object: its key and the raw bytes of its
// value.
type Field struct {
	Key string
	Raw []byte
}

// Fields are an object's members in their order. A few fields are found
// faster in a slice than in a map, and without a map's allocations (both
// count under TinyGo).
type Fields []Field

// Get is the raw value of key k (the last of duplicate keys), nil when
// there is none.
func (f Fields) Get(k string) []byte {
	for i := len(f) - 1; i >= 0; i-- {
		if f[i].Key == k {
			return f[i].Raw
		}
	}
	return nil
}

// Has reports whether key k is there.
func (f Fields) Has(k string) bool {
	for i := range f {
		if f[i].Key == k {
			return true
		}
	}
	return false
}

// Map is f as a map (the last of duplicate keys wins).
func (f Fields) Map() map[string][]byte {
	m := make(map[string][]byte, len(f))
	for _, x := range f {
		m[x.Key] = x.Raw
	}
	return m
}

// RawFields splits a JSON object into its keys and the raw bytes of their
// values, without building a tree (the last of duplicate keys wins).
func RawFields(data []byte) (map[string][]byte, error) {
	f, err := RawFieldList(data)
	if err != nil {
		return nil, err
	}
	return f.Map(), nil
}

// RawFieldList is RawFields' members in their order.
func RawFieldList(data []byte) (Fields, error) {
	p := parser{d: data}
	p.ws()
	if p.i >= len(p.d) || p.d[p.i] != '{' {
		return nil, p.fail("expected an object")
	}
	p.i++
	out := Fields{}
	p.ws()
	if p.i < len(p.d) && p.d[p.i] == '}' {
		return out, nil
	}
	for {
		p.ws()
		if p.i >= len(p.d) || p.d[p.i] != '"' {
			return nil, p.fail("expected a string key")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if p.i >= len(p.d) || p.d[p.i] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.i++
		p.ws()
		start := p.i
		if err := p.skip(0); err != nil {
			return nil, err
		}
		out = append(out, Field{k, p.d[start:p.i]})
		p.ws()
		if p.i >= len(p.d) {
			return nil, p.fail("unexpected end of input in object")
		}
		if p.d[p.i] == ',' {
			p.i++
			continue
		}
		if p.d[p.i] == '}' {
			return out, nil
		}
		return nil, p.fail("expected ',' or '}'")
	}
}

// skip moves past one value, checking its syntax.
func (p *parser) skip(depth int) error {
	if depth > maxDepth {
		return p.fail("nesting too deep")
	}
	if p.i >= len(p.d) {
		return p.fail("unexpected end of input")
	}
	switch c := p.d[p.i]; {
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		p.i++
		p.ws()
		if p.i < len(p.d) && p.d[p.i] == closer {
			p.i++
			return nil
		}
		for {
			p.ws()
			if c == '{' {
				if p.i >= len(p.d) || p.d[p.i] != '"' {
					return p.fail("expected a string key")
				}
				if err := p.skipStr(); err != nil {
					return err
				}
				p.ws()
				if p.i >= len(p.d) || p.d[p.i] != ':' {
					return p.fail("expected ':'")
				}
				p.i++
				p.ws()
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.d) {
				return p.fail("unexpected end of input")
			}
			if p.d[p.i] == ',' {
				p.i++
				continue
			}
			if p.d[p.i] == closer {
				p.i++
				return nil
			}
			return p.fail("expected ',' or a closing bracket")
		}
	case c == '"':
		return p.skipStr()
	}
	// A literal or a number, checked without making a Value (which would
	// cut a slab of them from the heap); the parser says what is wrong.
	end, ok := 0, false
	switch c := p.d[p.i]; {
	case c == 't':
		end, ok = checkLiteral(p.d, p.i, "true")
	case c == 'f':
		end, ok = checkLiteral(p.d, p.i, "false")
	case c == 'n':
		end, ok = checkLiteral(p.d, p.i, "null")
	default:
		end, ok = checkNumber(p.d, p.i)
	}
	if ok {
		p.i = end
		return nil
	}
	_, err := p.value(depth)
	return err
}

func (p *parser) skipStr() error {
	d, i := p.d, p.i+1
	for i < len(d) {
		switch c := d[i]; {
		case c == '"':
			p.i = i + 1
			return nil
		case c == '\\':
			i += 2
		case c < 0x20:
			p.i = i
			return p.fail("control character in string")
		default:
			i++
		}
	}
	p.i = i
	return p.fail("unterminated string")
}

// RawFieldsParsed is RawFields, except that the value of parseKey is parsed
// as Parse parses it (into parsed, nil when the key is absent) instead of
// being skipped: one pass over a request instead of a skip and a parse of
// its object.
func RawFieldsParsed(data []byte, parseKey string, mode NumberMode) (fields map[string][]byte, parsed *Value, err error) {
	p := parser{d: data, mode: mode, src: string(data)}
	p.ws()
	f, parsed, err := p.fieldsParsed(parseKey)
	if err != nil {
		return nil, nil, err
	}
	return f.Map(), parsed, nil
}

// RawFieldsNested reads an object in one pass: its fields' raw values, the
// fields of its object-valued nestedKey (RawFieldsParsed's, with parseKey
// parsed). It reads a ValidationRequest {"request": {..., "object": ...},
// "settings": ...} without skipping the request's object twice.
//
// The strings of the parsed value are substrings of data itself, not of a
// copy (data is the largest input a call reads, and a copy of it per call
// is garbage under TinyGo): data must not change while the value is in
// use.
//
// The parsed value is read lazily (see Reader), with a Reader of its own.
func RawFieldsNested(data []byte, nestedKey, parseKey string, mode NumberMode) (fields, nested Fields, parsed *Value, err error) {
	return new(Reader).RawFieldsNested(data, nestedKey, parseKey, mode)
}

// RawFieldsNested is RawFieldsNested with r's index.
func (r *Reader) RawFieldsNested(data []byte, nestedKey, parseKey string, mode NumberMode) (fields, nested Fields, parsed *Value, err error) {
	p := parser{d: data, mode: mode, src: unsafe.String(unsafe.SliceData(data), len(data)), reader: r}
	p.ws()
	if p.i >= len(p.d) || p.d[p.i] != '{' {
		return nil, nil, nil, p.fail("expected an object")
	}
	p.i++
	fields = Fields{}
	p.ws()
	if p.i < len(p.d) && p.d[p.i] == '}' {
		p.i++
		return fields, nil, nil, nil
	}
	for {
		p.ws()
		if p.i >= len(p.d) || p.d[p.i] != '"' {
			return nil, nil, nil, p.fail("expected a string key")
		}
		k, err := p.str()
		if err != nil {
			return nil, nil, nil, err
		}
		p.ws()
		if p.i >= len(p.d) || p.d[p.i] != ':' {
			return nil, nil, nil, p.fail("expected ':'")
		}
		p.i++
		p.ws()
		start := p.i
		if k == nestedKey && p.i < len(p.d) && p.d[p.i] == '{' {
			if nested, parsed, err = p.fieldsParsed(parseKey); err != nil {
				return nil, nil, nil, err
			}
		} else {
			if k == nestedKey {
				nested, parsed = nil, nil
			}
			if err := p.skip(0); err != nil {
				return nil, nil, nil, err
			}
		}
		fields = append(fields, Field{k, p.d[start:p.i]})
		p.ws()
		if p.i >= len(p.d) {
			return nil, nil, nil, p.fail("unexpected end of input in object")
		}
		if p.d[p.i] == ',' {
			p.i++
			continue
		}
		if p.d[p.i] == '}' {
			return fields, nested, parsed, nil
		}
		return nil, nil, nil, p.fail("expected ',' or '}'")
	}
}

// fieldsParsed reads the object at p.i (see RawFieldsParsed) and leaves
// p.i after it.
func (p *parser) fieldsParsed(parseKey string) (fields Fields, parsed *Value, err error) {
	if p.i >= len(p.d) || p.d[p.i] != '{' {
		return nil, nil, p.fail("expected an object")
	}
	p.i++
	out := make(Fields, 0, 16)
	p.ws()
	if p.i < len(p.d) && p.d[p.i] == '}' {
		p.i++
		return out, nil, nil
	}
	for {
		p.ws()
		if p.i >= len(p.d) || p.d[p.i] != '"' {
			return nil, nil, p.fail("expected a string key")
		}
		k, err := p.str()
		if err != nil {
			return nil, nil, err
		}
		p.ws()
		if p.i >= len(p.d) || p.d[p.i] != ':' {
			return nil, nil, p.fail("expected ':'")
		}
		p.i++
		p.ws()
		start := p.i
		if k == parseKey {
			var v *Value
			if p.reader != nil {
				d := p.reader.doc(p.d, p.mode, p.src)
				d.p.i = p.i
				v, err = d.value()
				p.i = d.p.i
			} else {
				v, err = p.value(0)
			}
			if err != nil {
				return nil, nil, err
			}
			parsed = v
		} else if err := p.skip(0); err != nil {
			return nil, nil, err
		}
		out = append(out, Field{k, p.d[start:p.i]})
		p.ws()
		if p.i >= len(p.d) {
			return nil, nil, p.fail("unexpected end of input in object")
		}
		if p.d[p.i] == ',' {
			p.i++
			continue
		}
		if p.d[p.i] == '}' {
			p.i++
			return out, parsed, nil
		}
		return nil, nil, p.fail("expected ',' or '}'")
	}
}
