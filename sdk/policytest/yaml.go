//go:build !wasip1

package policytest

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A reader for the YAML that kwctl session files use (the SDK has no
// dependencies, so no YAML library): block mappings and sequences (a
// sequence may sit at its key's indentation, as serde_yaml writes it),
// plain, single- and double-quoted scalars (folded across lines), literal
// and folded block scalars, flow mappings and sequences, comments, a
// leading "---", and a tag on a document's first line (`!KubernetesCanI`).
// Anchors, aliases, multi-document streams and complex keys are refused.
// Values decode as encoding/json would decode the same JSON: map[string]any,
// []any, string, float64, bool, nil.

type yamlLine struct {
	num    int    // 1-based line number
	indent int    // leading spaces
	text   string // the line without its indentation
	raw    string // the whole line
}

type yamlParser struct {
	lines []yamlLine
	i     int
}

// yamlError is a parse error naming the line.
type yamlError struct {
	line int
	msg  string
}

func (e *yamlError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// parseYAML reads one document. tag is the document's tag ("" when none).
func parseYAML(src string) (value any, tag string, err error) {
	defer func() {
		if r := recover(); r != nil {
			ye, ok := r.(*yamlError)
			if !ok {
				panic(r)
			}
			value, tag, err = nil, "", ye
		}
	}()
	p := &yamlParser{}
	for n, raw := range strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n") {
		if strings.ContainsRune(raw, '\t') && strings.TrimLeft(raw, " ") != "" && strings.TrimLeft(raw, " ")[0] == '\t' {
			return nil, "", &yamlError{n + 1, "a tab in indentation"}
		}
		text := strings.TrimLeft(raw, " ")
		p.lines = append(p.lines, yamlLine{num: n + 1, indent: len(raw) - len(text), text: strings.TrimRight(text, " \t"), raw: raw})
	}
	p.skipBlank()
	if p.i < len(p.lines) && (p.lines[p.i].text == "---" || strings.HasPrefix(p.lines[p.i].text, "--- ")) {
		l := &p.lines[p.i]
		rest := strings.TrimSpace(strings.TrimPrefix(l.text, "---"))
		if rest == "" {
			p.i++
		} else {
			l.indent += len(l.text) - len(rest)
			l.text = rest
		}
	}
	p.skipBlank()
	if p.i < len(p.lines) && strings.HasPrefix(p.lines[p.i].text, "!") {
		l := &p.lines[p.i]
		tag, rest, _ := strings.Cut(l.text, " ")
		tag = tag[1:]
		rest = strings.TrimSpace(rest)
		if rest == "" {
			p.i++
		} else {
			l.indent += len(l.text) - len(rest)
			l.text = rest
		}
		p.skipBlank()
		if p.i >= len(p.lines) {
			return nil, tag, nil
		}
		v := p.block(p.lines[p.i].indent)
		p.end()
		return v, tag, nil
	}
	if p.i >= len(p.lines) {
		return nil, "", nil
	}
	v := p.block(p.lines[p.i].indent)
	p.end()
	return v, "", nil
}

func (p *yamlParser) fail(line int, format string, args ...any) {
	panic(&yamlError{line, fmt.Sprintf(format, args...)})
}

func (p *yamlParser) end() {
	p.skipBlank()
	if p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.text == "..." {
			return
		}
		p.fail(l.num, "unexpected %q (wrong indentation?)", l.text)
	}
}

func isBlank(text string) bool { return text == "" || text[0] == '#' }

func (p *yamlParser) skipBlank() {
	for p.i < len(p.lines) && isBlank(p.lines[p.i].text) {
		p.i++
	}
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

// block reads the node whose first line is the current one, at indent.
func (p *yamlParser) block(indent int) any {
	l := p.lines[p.i]
	if isSeqItem(l.text) {
		return p.sequence(l.indent)
	}
	if _, _, ok := splitKey(l.text); ok {
		return p.mapping(l.indent)
	}
	p.i++
	return p.scalarValue(l, l.text, indent-1)
}

func (p *yamlParser) sequence(indent int) []any {
	out := []any{}
	for {
		p.skipBlank()
		if p.i >= len(p.lines) {
			return out
		}
		l := &p.lines[p.i]
		if l.indent != indent || !isSeqItem(l.text) {
			if l.indent > indent {
				p.fail(l.num, "unexpected indentation")
			}
			return out
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if rest == "" {
			p.i++
			p.skipBlank()
			if p.i < len(p.lines) && p.lines[p.i].indent > indent {
				out = append(out, p.block(p.lines[p.i].indent))
			} else {
				out = append(out, nil)
			}
			continue
		}
		// The item's node starts on this line, after "- ".
		l.indent += len(l.text) - len(rest)
		l.text = rest
		out = append(out, p.block(l.indent))
	}
}

func (p *yamlParser) mapping(indent int) map[string]any {
	out := map[string]any{}
	for {
		p.skipBlank()
		if p.i >= len(p.lines) {
			return out
		}
		l := p.lines[p.i]
		if l.indent != indent {
			if l.indent > indent {
				p.fail(l.num, "unexpected indentation")
			}
			return out
		}
		key, rest, ok := splitKey(l.text)
		if !ok {
			if isSeqItem(l.text) {
				return out
			}
			p.fail(l.num, "expected a key: value, got %q", l.text)
		}
		if _, dup := out[key]; dup {
			p.fail(l.num, "duplicate key %q", key)
		}
		p.i++
		if rest == "" || rest[0] == '#' {
			p.skipBlank()
			switch {
			case p.i < len(p.lines) && p.lines[p.i].indent > indent:
				out[key] = p.block(p.lines[p.i].indent)
			case p.i < len(p.lines) && p.lines[p.i].indent == indent && isSeqItem(p.lines[p.i].text):
				out[key] = p.sequence(indent)
			default:
				out[key] = nil
			}
			continue
		}
		out[key] = p.scalarValue(l, rest, indent)
	}
}

// splitKey splits "key: rest" or "key:" (key plain or quoted).
func splitKey(text string) (key, rest string, ok bool) {
	if text == "" || strings.ContainsRune("[{#!&*|>%@`-", rune(text[0])) && !(text[0] == '-' && !isSeqItem(text)) {
		return "", "", false
	}
	if text[0] == '\'' || text[0] == '"' {
		k, n, err := quotedOnLine(text)
		if err != nil {
			return "", "", false
		}
		after := text[n:]
		if after == ":" || strings.HasPrefix(after, ": ") {
			return k, strings.TrimSpace(after[1:]), true
		}
		return "", "", false
	}
	if i := strings.Index(text, ": "); i >= 0 {
		return strings.TrimRight(text[:i], " "), strings.TrimSpace(text[i+2:]), true
	}
	if strings.HasSuffix(text, ":") {
		return strings.TrimRight(text[:len(text)-1], " "), "", true
	}
	return "", "", false
}

// quotedOnLine reads a quoted scalar that ends on this line; n is the
// length it took.
func quotedOnLine(text string) (string, int, error) {
	p := &yamlParser{lines: []yamlLine{{num: 1, text: text, raw: text}}}
	var s string
	var n int
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		s, n = p.quoted(0, 0)
		return nil
	}()
	if err != nil || p.i != 0 {
		return "", 0, fmt.Errorf("not a one-line quoted scalar")
	}
	return s, n, nil
}

// scalarValue reads the value that starts with text on line l (already
// consumed) of a node whose parent sits at parentIndent.
func (p *yamlParser) scalarValue(l yamlLine, text string, parentIndent int) any {
	switch text[0] {
	case '\'', '"':
		p.i--
		line := &p.lines[p.i]
		// text is a suffix of line.text, which starts at line.indent in raw.
		start := line.indent + len(line.text) - len(text)
		s, n := p.quoted(p.i, start)
		tail := strings.TrimSpace(p.lines[p.i].raw[n:])
		if tail != "" && tail[0] != '#' {
			p.fail(p.lines[p.i].num, "unexpected %q after a quoted scalar", tail)
		}
		p.i++
		return s
	case '|', '>':
		return p.blockScalar(l, text, parentIndent)
	case '{', '[':
		src := text
		for depth(src) > 0 && p.i < len(p.lines) {
			src += " " + p.lines[p.i].text
			p.i++
		}
		f := &flowParser{src: src, line: l.num}
		v := f.value()
		f.space()
		if f.pos < len(f.src) && f.src[f.pos] != '#' {
			p.fail(l.num, "unexpected %q after a flow collection", f.src[f.pos:])
		}
		return v
	case '&', '*':
		p.fail(l.num, "anchors and aliases are not supported")
	case '!':
		p.fail(l.num, "tags are only supported on a document's first line")
	}
	// A plain scalar, perhaps folded over more-indented lines.
	s := stripComment(text)
	for p.i < len(p.lines) {
		n := p.lines[p.i]
		if isBlank(n.text) {
			if n.text == "" && p.i+1 < len(p.lines) && p.lines[p.i+1].indent > parentIndent && !isBlank(p.lines[p.i+1].text) {
				s += "\n"
				p.i++
				continue
			}
			break
		}
		if n.indent <= parentIndent {
			break
		}
		if _, _, isKey := splitKey(n.text); isKey {
			p.fail(n.num, "a mapping cannot follow a scalar on the same node")
		}
		if strings.HasSuffix(s, "\n") {
			s += stripComment(n.text)
		} else {
			s += " " + stripComment(n.text)
		}
		p.i++
	}
	return plain(s)
}

func stripComment(s string) string {
	if i := strings.Index(s, " #"); i >= 0 {
		return strings.TrimRight(s[:i], " ")
	}
	return s
}

// depth is the count of unclosed brackets in a flow collection's source
// (outside quotes).
func depth(s string) int {
	d := 0
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q == '\'':
			if c == '\'' {
				q = 0
			}
		case q == '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '{' || c == '[':
			d++
		case c == '}' || c == ']':
			d--
		}
	}
	return d
}

// plain gives a plain scalar its JSON type.
func plain(s string) any {
	switch s {
	case "", "~", "null", "Null", "NULL":
		return nil
	case "true", "True", "TRUE":
		return true
	case "false", "False", "FALSE":
		return false
	}
	if c := s[0]; c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9') {
		if i, err := strconv.ParseInt(s, 0, 64); err == nil {
			return float64(i)
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "xXpP_") {
			return f
		}
	}
	return s
}

// quoted reads a quoted scalar starting at byte col of line li, folding
// line breaks as YAML does; it leaves p.i on the closing line and returns
// the byte after the closing quote.
func (p *yamlParser) quoted(li, col int) (string, int) {
	p.i = li
	raw := p.lines[li].raw
	q := raw[col]
	var b strings.Builder
	pos := col + 1
	for {
		raw = p.lines[p.i].raw
		for pos < len(raw) {
			c := raw[pos]
			switch {
			case c == '\'' && q == '\'':
				if pos+1 < len(raw) && raw[pos+1] == '\'' {
					b.WriteByte('\'')
					pos += 2
					continue
				}
				return b.String(), pos + 1
			case c == '"' && q == '"':
				return b.String(), pos + 1
			case c == '\\' && q == '"':
				if pos+1 >= len(raw) { // an escaped line break: no space
					pos = len(raw) + 1
					goto next
				}
				pos = p.escape(&b, raw, pos+1)
				continue
			}
			b.WriteByte(c)
			pos++
		}
		// A line break inside the scalar: trailing spaces go, and the break
		// folds to a space, or to "\n" per empty line that follows.
		{
			s := strings.TrimRight(b.String(), " \t")
			b.Reset()
			b.WriteString(s)
		}
		if p.i+1 >= len(p.lines) {
			p.fail(p.lines[p.i].num, "unterminated quoted scalar")
		}
		{
			empty := 0
			for p.i+1 < len(p.lines) && strings.TrimSpace(p.lines[p.i+1].raw) == "" {
				p.i++
				empty++
			}
			if empty == 0 {
				b.WriteByte(' ')
			}
			for ; empty > 0; empty-- {
				b.WriteByte('\n')
			}
		}
	next:
		if p.i+1 >= len(p.lines) {
			p.fail(p.lines[p.i].num, "unterminated quoted scalar")
		}
		p.i++
		raw = p.lines[p.i].raw
		pos = len(raw) - len(strings.TrimLeft(raw, " \t"))
	}
}

func (p *yamlParser) escape(b *strings.Builder, raw string, pos int) int {
	c := raw[pos]
	simple := map[byte]string{'0': "\x00", 'a': "\a", 'b': "\b", 't': "\t", '\t': "\t", 'n': "\n", 'v': "\v",
		'f': "\f", 'r': "\r", 'e': "\x1b", ' ': " ", '"': "\"", '/': "/", '\\': "\\", 'N': "\u0085", '_': "\u00a0",
		'L': "\u2028", 'P': "\u2029"}
	if s, ok := simple[c]; ok {
		b.WriteString(s)
		return pos + 1
	}
	n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
	if n == 0 || pos+1+n > len(raw) {
		p.fail(p.lines[p.i].num, "bad escape \\%c", c)
	}
	r, err := strconv.ParseUint(raw[pos+1:pos+1+n], 16, 32)
	if err != nil || !utf8.ValidRune(rune(r)) {
		p.fail(p.lines[p.i].num, "bad escape \\%s", raw[pos:pos+1+n])
	}
	b.WriteRune(rune(r))
	return pos + 1 + n
}

// blockScalar reads a literal (|) or folded (>) block scalar whose header
// is text.
func (p *yamlParser) blockScalar(l yamlLine, text string, parentIndent int) string {
	header := stripComment(text)
	folded := header[0] == '>'
	chomp := byte(0)
	explicit := 0
	for _, c := range header[1:] {
		switch {
		case c == '-' || c == '+':
			chomp = byte(c)
		case c >= '1' && c <= '9':
			explicit = int(c - '0')
		default:
			p.fail(l.num, "bad block scalar header %q", header)
		}
	}
	contentIndent := -1
	if explicit > 0 {
		contentIndent = parentIndent + 1 + explicit
		if parentIndent < 0 {
			contentIndent = explicit
		}
	}
	var lines []string
	for p.i < len(p.lines) {
		n := p.lines[p.i]
		if strings.TrimSpace(n.raw) == "" {
			lines = append(lines, "")
			p.i++
			continue
		}
		if contentIndent < 0 {
			if n.indent <= parentIndent {
				break
			}
			contentIndent = n.indent
		}
		if n.indent < contentIndent {
			break
		}
		lines = append(lines, n.raw[contentIndent:])
		p.i++
	}
	// Trailing empty lines belong to chomping.
	trailing := 0
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
		trailing++
	}
	var s string
	if !folded {
		s = strings.Join(lines, "\n")
	} else {
		var b strings.Builder
		for i, line := range lines {
			if i > 0 {
				prev := lines[i-1]
				switch {
				case line == "":
					b.WriteByte('\n')
				case prev == "":
				case line[0] == ' ' || prev[0] == ' ':
					b.WriteByte('\n')
				default:
					b.WriteByte(' ')
				}
			}
			b.WriteString(line)
		}
		s = b.String()
	}
	if len(lines) == 0 {
		return ""
	}
	switch chomp {
	case '-':
		return s
	case '+':
		return s + strings.Repeat("\n", trailing+1)
	}
	return s + "\n"
}

// flowParser reads a flow collection ({a: b, c: [1, 2]}) on one logical line.
type flowParser struct {
	src  string
	pos  int
	line int
}

func (f *flowParser) fail(format string, args ...any) {
	panic(&yamlError{f.line, fmt.Sprintf(format, args...)})
}

func (f *flowParser) space() {
	for f.pos < len(f.src) && (f.src[f.pos] == ' ' || f.src[f.pos] == '\t') {
		f.pos++
	}
}

func (f *flowParser) value() any {
	f.space()
	if f.pos >= len(f.src) {
		f.fail("unexpected end of a flow collection")
	}
	switch f.src[f.pos] {
	case '{':
		f.pos++
		out := map[string]any{}
		for {
			f.space()
			if f.pos < len(f.src) && f.src[f.pos] == '}' {
				f.pos++
				return out
			}
			k := f.scalar(true)
			key, _ := k.(string)
			if k != nil && key == "" {
				key = fmt.Sprint(k)
			}
			f.space()
			var v any
			if f.pos < len(f.src) && f.src[f.pos] == ':' {
				f.pos++
				v = f.value()
			}
			out[key] = v
			f.space()
			if f.pos < len(f.src) && f.src[f.pos] == ',' {
				f.pos++
				continue
			}
			if f.pos < len(f.src) && f.src[f.pos] == '}' {
				f.pos++
				return out
			}
			f.fail("expected , or } in a flow mapping")
		}
	case '[':
		f.pos++
		out := []any{}
		for {
			f.space()
			if f.pos < len(f.src) && f.src[f.pos] == ']' {
				f.pos++
				return out
			}
			out = append(out, f.value())
			f.space()
			if f.pos < len(f.src) && f.src[f.pos] == ',' {
				f.pos++
				continue
			}
			if f.pos < len(f.src) && f.src[f.pos] == ']' {
				f.pos++
				return out
			}
			f.fail("expected , or ] in a flow sequence")
		}
	}
	return f.scalar(false)
}

func (f *flowParser) scalar(key bool) any {
	f.space()
	if f.pos < len(f.src) && (f.src[f.pos] == '\'' || f.src[f.pos] == '"') {
		s, n, err := quotedOnLine(f.src[f.pos:])
		if err != nil {
			f.fail("unterminated quoted scalar in a flow collection")
		}
		f.pos += n
		return s
	}
	start := f.pos
	for f.pos < len(f.src) {
		c := f.src[f.pos]
		if c == ',' || c == ']' || c == '}' || c == '[' || c == '{' || (c == ':' && (key || f.pos+1 >= len(f.src) || f.src[f.pos+1] == ' ')) {
			break
		}
		f.pos++
	}
	return plain(strings.TrimSpace(f.src[start:f.pos]))
}
