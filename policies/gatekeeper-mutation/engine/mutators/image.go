package mutators

import (
	"errors"
	"strconv"
	"strings"
)

// Gatekeeper validates image parts with three regular expressions
// (assignimage/imageparser.go). Go's regexp does not run under TinyGo here:
// compiling the tag expression's {0,127} recursed past the stack and trapped
// the module. These functions decide the same languages by hand;
// image_test.go checks them against the expressions natively.

func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// matchDomain: (^\w[\w\-_]*\.[\w\-_\.]*[\w](:\d+)?$)|(^localhost(:\d+)?$)
func matchDomain(s string) bool {
	host := s
	if i := strings.IndexByte(s, ':'); i >= 0 {
		if !isDigits(s[i+1:]) {
			return false
		}
		host = s[:i]
	}
	if host == "localhost" {
		return true
	}
	if len(host) < 3 || !isWord(host[0]) || !isWord(host[len(host)-1]) {
		return false
	}
	dot := -1
	for i := 0; i < len(host); i++ {
		c := host[i]
		if c == '.' {
			if dot < 0 {
				dot = i
			}
			continue
		}
		if !isWord(c) && c != '-' {
			return false
		}
	}
	return dot >= 1 && dot < len(host)-1
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// matchPath reports whether ^[a-z0-9]+(?:(?:(?:[._/]|__|[-]*)[a-z0-9]+)+)?
// matches all of s (Gatekeeper compares FindString with the path).
func matchPath(s string) bool {
	i := 0
	run := func() bool {
		start := i
		for i < len(s) && isLowerAlnum(s[i]) {
			i++
		}
		return i > start
	}
	if !run() {
		return false
	}
	for i < len(s) {
		switch s[i] {
		case '.', '/':
			i++
		case '_':
			i++
			if i < len(s) && s[i] == '_' {
				i++
			}
		case '-':
			for i < len(s) && s[i] == '-' {
				i++
			}
		}
		if !run() {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// matchTag: (^:[\w][\w.-]{0,127}$)|(^@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}$)
func matchTag(s string) bool {
	if len(s) >= 2 && s[0] == ':' {
		if len(s) > 129 || !isWord(s[1]) {
			return false
		}
		for i := 2; i < len(s); i++ {
			if !isWord(s[i]) && s[i] != '.' && s[i] != '-' {
				return false
			}
		}
		return true
	}
	if len(s) < 2 || s[0] != '@' {
		return false
	}
	colon := strings.IndexByte(s, ':')
	if colon < 0 {
		return false
	}
	alg, hex := s[1:colon], s[colon+1:]
	if len(hex) < 32 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if !isHex(hex[i]) {
			return false
		}
	}
	// [A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*
	needLetter := true
	for i := 0; i < len(alg); i++ {
		c := alg[i]
		switch {
		case needLetter:
			if !isLetter(c) {
				return false
			}
			needLetter = false
		case c == '-' || c == '_' || c == '+' || c == '.':
			needLetter = true
		case !isLetter(c) && !(c >= '0' && c <= '9'):
			return false
		}
	}
	return !needLetter
}

func mutateImage(domain, path, tag, ref string) string {
	d, remainder := splitDomain(ref)
	p, t := splitTag(remainder)
	if domain != "" {
		d = domain
	}
	if path != "" {
		p = path
	}
	if tag != "" {
		t = tag
	}
	if d != "" {
		d += "/"
	}
	return d + p + t
}

func splitTag(remainder string) (string, string) {
	if i := strings.IndexAny(remainder, ":@"); i > -1 {
		return remainder[:i], remainder[i:]
	}
	return remainder, ""
}

func splitDomain(name string) (string, string) {
	i := strings.IndexRune(name, '/')
	if i == -1 || (!strings.ContainsAny(name[:i], ".:") && name[:i] != "localhost") {
		return "", name
	}
	return name[:i], name[i+1:]
}

func validateImageParts(domain, path, tag string) error {
	if domain == "" && path == "" && tag == "" {
		return errors.New("at least one of [assignDomain, assignPath, assignTag] must be set")
	}
	if domain != "" {
		if !matchDomain(domain) {
			return errors.New("assignDomain " + strconv.Quote(domain) + " must be a fully-qualified domain name or localhost")
		}
		if d, r := splitDomain(domain + "/"); d != domain || r != "" {
			return errors.New("domain " + strconv.Quote(domain) + " could not be recognized as a valid domain")
		}
	}
	if path != "" && !matchPath(path) {
		return errors.New("assignPath " + strconv.Quote(path) + " must be a valid docker image path")
	}
	if tag != "" {
		if !matchTag(tag) {
			return errors.New("assignTag " + strconv.Quote(tag) + " must be a valid docker image tag or digest starting with ':' or '@'")
		}
		if p, t := splitTag(tag); t != tag || p != "" {
			return errors.New("tag " + strconv.Quote(tag) + " could not be recognized as a valid tag or digest")
		}
	}
	if domain == "" {
		if d, _ := splitDomain(path); d != "" {
			return errors.New("assignDomain must be set if the first part of assignPath " + strconv.Quote(path) + " can be interpretted as part of a domain")
		}
	}
	return nil
}
