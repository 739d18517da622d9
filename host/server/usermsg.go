package server

import (
	"strings"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/internal/redact"
)

// maxUserMessage caps the message of an evaluation or load failure that
// goes back to the apiserver (and so to kubectl and audit logs).
const maxUserMessage = 400

// userMessage is what the apiserver is told about err, a failure of policy
// id (a group's members are "id/member"): its first line, without the
// guest's stderr, with the id that wrapped it once removed (the message names
// the policy already), redacted (internal/redact, with the credentials of uris), at most maxUserMessage bytes
// with prefix. The Wasm stack trace, a Go runtime's goroutine dump and the
// guest's stderr follow the first line or the " (stderr " mark, so they stay
// in the server log, which has the whole error.
func userMessage(prefix, id string, err error, uris ...string) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, " (stderr "); i >= 0 {
		s = s[:i]
	}
	s = strings.Replace(s, "policy "+id+": ", "", 1)
	// a group member's own wrapping: "member a: policy group/a: cause"
	if i := strings.Index(s, "policy "+id+"/"); i >= 0 {
		if j := strings.Index(s[i:], ": "); j >= 0 {
			s = s[:i] + s[i+j+2:]
		}
	}
	return truncate(redact.Text(prefix+s, uris...), maxUserMessage)
}

// truncate cuts s to at most n bytes at a rune boundary, ending with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ell = "…"
	cut := n - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}
