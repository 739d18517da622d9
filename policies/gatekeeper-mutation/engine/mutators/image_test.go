package mutators

import (
	"math/rand"
	"regexp"
	"testing"
)

// Gatekeeper's expressions (assignimage/imageparser.go), run natively.
var (
	domainRegexp = regexp.MustCompile(`(^\w[\w\-_]*\.[\w\-_\.]*[\w](:\d+)?$)|(^localhost(:\d+)?$)`)
	pathRegexp   = regexp.MustCompile(`^[a-z0-9]+(?:(?:(?:[._/]|__|[-]*)[a-z0-9]+)+)?`)
	tagRegexp    = regexp.MustCompile(`(^:[\w][\w.-]{0,127}$)|(^@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}$)`)
)

func checkImageMatchers(t *testing.T, s string) {
	t.Helper()
	if got, want := matchDomain(s), domainRegexp.MatchString(s); got != want {
		t.Errorf("matchDomain(%q) = %v, regexp %v", s, got, want)
	}
	// Gatekeeper checks the path only when it is set.
	if got, want := matchPath(s), s == pathRegexp.FindString(s); s != "" && got != want {
		t.Errorf("matchPath(%q) = %v, regexp %v", s, got, want)
	}
	if got, want := matchTag(s), tagRegexp.MatchString(s); got != want {
		t.Errorf("matchTag(%q) = %v, regexp %v", s, got, want)
	}
}

func TestImageMatchersAgreeWithRegexps(t *testing.T) {
	fixed := []string{"", "localhost", "localhost:5000", "localhost:", "a.b", "a.b:1", ".a.b", "a.b.", "a_b.c-d:80", "a..b", "a:1:2",
		"lib/stuff", "a__b", "a___b", "a--b", "a-", "-a", "a/b/", "A/b", ":latest", ":" + string(make([]byte, 0)), ":a" + repeat("b", 127), ":a" + repeat("b", 128),
		"@sha256:" + repeat("a", 32), "@sha256:" + repeat("a", 31), "@sha256+x.y:" + repeat("F", 40), "@sha-:" + repeat("a", 32), "@1a:" + repeat("a", 32), "@a:b:" + repeat("a", 32)}
	for _, s := range fixed {
		checkImageMatchers(t, s)
	}
	alphabet := "ab0Z_-.:/@+lo"
	r := rand.New(rand.NewSource(7))
	for n := 0; n < 20000; n++ {
		b := make([]byte, r.Intn(12))
		for i := range b {
			b[i] = alphabet[r.Intn(len(alphabet))]
		}
		s := string(b)
		if r.Intn(4) == 0 {
			s = []string{":", "@sha256:" + repeat("a", 32), "localhost", "x.y"}[r.Intn(4)] + s
		}
		checkImageMatchers(t, s)
	}
}

func repeat(s string, n int) string {
	out := ""
	for i := 0; i < n; i++ {
		out += s
	}
	return out
}
