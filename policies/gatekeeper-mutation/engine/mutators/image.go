package mutators

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// Gatekeeper's assignimage/imageparser.go regular expressions, compiled on
// first use (settings time only).
var (
	domainRegexp, pathRegexp, tagRegexp *regexp.Regexp
)

func compileImageRegexps() {
	if domainRegexp != nil {
		return
	}
	domainRegexp = regexp.MustCompile(`(^\w[\w\-_]*\.[\w\-_\.]*[\w](:\d+)?$)|(^localhost(:\d+)?$)`)
	pathRegexp = regexp.MustCompile(`^[a-z0-9]+(?:(?:(?:[._/]|__|[-]*)[a-z0-9]+)+)?`)
	tagRegexp = regexp.MustCompile(`(^:[\w][\w.-]{0,127}$)|(^@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}$)`)
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
	compileImageRegexps()
	if domain == "" && path == "" && tag == "" {
		return errors.New("at least one of [assignDomain, assignPath, assignTag] must be set")
	}
	if domain != "" {
		if !domainRegexp.MatchString(domain) {
			return errors.New("assignDomain " + strconv.Quote(domain) + " must be a fully-qualified domain name or localhost")
		}
		if d, r := splitDomain(domain + "/"); d != domain || r != "" {
			return errors.New("domain " + strconv.Quote(domain) + " could not be recognized as a valid domain")
		}
	}
	if path != "" && path != pathRegexp.FindString(path) {
		return errors.New("assignPath " + strconv.Quote(path) + " must be a valid docker image path")
	}
	if tag != "" {
		if !tagRegexp.MatchString(tag) {
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
