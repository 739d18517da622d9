package redact

import (
	"net/url"
	"strings"
)

// Mask replaces every redacted credential.
const Mask = "xxxxx"

// URI is uri with its credentials masked: the password of its userinfo
// (https://user:xxxxx@host/...), or the whole userinfo when it has no
// password (a lone user name in a URL is usually a token:
// https://xxxxx@host/...), and the values of credential query parameters
// (CredentialKey), and the whole fragment (https://h/x.wasm#xxxxx: a
// fragment is never sent to a server, and OAuth's implicit flow puts its
// access_token there). Everything else is kept byte for byte; a string that is
// not a URI (a path) comes back unchanged. It never fails: it does not need
// uri to parse.
func URI(uri string) string {
	if m, ok := mask(uri); ok {
		return m
	}
	return Text(uri) // not a URI, but it may contain one
}

// Text is s with every URI in it masked as URI does, and every credential
// of the given URIs (in their raw or percent-decoded form, at least 4
// bytes) masked wherever s quotes it without its URI (a library's error
// that prints a host "user:pw@host" or a decoded query value).
func Text(s string, uris ...string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			break
		}
		start := i
		for start > 0 && isSchemeByte(s[start-1]) {
			start--
		}
		if start == i {
			b.WriteString(s[:i+3])
			s = s[i+3:]
			continue
		}
		b.WriteString(s[:start])
		n, red := scan(s[start:])
		b.WriteString(red)
		s = s[start+n:]
	}
	out := b.String()
	for _, u := range uris {
		for _, sec := range Secrets(u) {
			out = strings.ReplaceAll(out, sec, Mask)
		}
	}
	return out
}

// Secrets are the credentials of uri Text masks: the userinfo's password
// (or lone user name), the credential query values and the fragment, raw and
// percent-decoded, those shorter than 4 bytes left out (masking them
// everywhere would garble the text more than it hides).
func Secrets(uri string) []string {
	var out []string
	add := func(raw string) {
		for _, s := range []string{raw, unescape(raw)} {
			if len(s) >= 4 && s != Mask {
				out = append(out, s)
			}
		}
	}
	_, rest, ok := cutScheme(uri)
	if !ok {
		return nil
	}
	auth, tail := splitAuthority(rest)
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		user, pw, hasPW := strings.Cut(auth[:at], ":")
		if hasPW {
			add(pw)
		} else {
			add(user)
		}
	}
	tail, frag, hasFrag := strings.Cut(tail, "#")
	if hasFrag {
		add(frag)
	}
	if _, q, ok := strings.Cut(tail, "?"); ok {
		for _, kv := range strings.Split(q, "&") {
			if k, v, ok := strings.Cut(kv, "="); ok && CredentialKey(unescape(k)) {
				add(v)
			}
		}
	}
	return out
}

// CredentialKey reports whether a query parameter named key carries a
// credential: the names of signed URLs (S3's X-Amz-*, GCS's X-Goog-*,
// Azure SAS's sig), of API keys and tokens (token, access_token,
// private_token, api_key, key, code, jwt, bearer), of passwords and secrets,
// and any name containing token, secret, passw, signature, credential, auth,
// session or bearer (case-insensitive).
func CredentialKey(key string) bool {
	k := strings.ToLower(key)
	switch k {
	case "sig", "key", "code", "pass", "pwd", "jwt", "sas":
		return true
	}
	if strings.HasPrefix(k, "x-amz-") || strings.HasPrefix(k, "x-goog-") {
		return true
	}
	for _, sub := range []string{"token", "secret", "passw", "signature", "credential", "auth", "session", "apikey", "api_key", "api-key", "private", "bearer"} {
		if strings.Contains(k, sub) {
			return true
		}
	}
	return false
}

// Error is err whose message is Text(err.Error(), uris...); errors.Is and
// errors.As see err's chain unchanged. Nil stays nil.
func Error(err error, uris ...string) error {
	if err == nil {
		return nil
	}
	return &redacted{msg: Text(err.Error(), uris...), err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// scan masks the URI at the start of s; it returns how many bytes of s the
// URI took and its masked form. The URI ends at white space, a quote, '<',
// '>' or '`' (as when it is quoted in a message).
func scan(s string) (int, string) {
	end := strings.IndexAny(s, " \t\r\n\"'<>`")
	if end < 0 {
		end = len(s)
	}
	m, _ := mask(s[:end])
	return end, m
}

// mask masks the URI u. Without a scheme (letters, digits, "+-.") before
// "://", it is not a URI: it comes back unchanged and false.
func mask(u string) (string, bool) {
	head, rest, ok := cutScheme(u)
	if !ok {
		return u, false
	}
	var b strings.Builder
	b.WriteString(head + "://")
	auth, tail := splitAuthority(rest)
	if at := strings.LastIndexByte(auth, '@'); at > 0 {
		if user, _, hasPW := strings.Cut(auth[:at], ":"); hasPW {
			b.WriteString(user + ":" + Mask)
		} else {
			b.WriteString(Mask)
		}
		auth = auth[at:]
	}
	b.WriteString(auth)
	// The fragment starts at the first '#', and may hold '?'.
	tail, _, hasFrag := strings.Cut(tail, "#")
	path, q, hasQ := strings.Cut(tail, "?")
	b.WriteString(path)
	if hasQ {
		b.WriteByte('?')
		for i, kv := range strings.Split(q, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			if k, _, ok := strings.Cut(kv, "="); ok && CredentialKey(unescape(k)) {
				kv = k + "=" + Mask
			}
			b.WriteString(kv)
		}
	}
	if hasFrag {
		b.WriteString("#" + Mask)
	}
	return b.String(), true
}

// cutScheme splits u at its "://" when a scheme (letters, digits, "+-.")
// precedes it.
func cutScheme(u string) (scheme, rest string, ok bool) {
	scheme, rest, ok = strings.Cut(u, "://")
	if !ok || scheme == "" || strings.IndexFunc(scheme, func(r rune) bool { return r > 0x7f || !isSchemeByte(byte(r)) }) >= 0 {
		return "", "", false
	}
	return scheme, rest, true
}

// splitAuthority splits what follows "://" into the authority and the rest
// (path, query, fragment).
func splitAuthority(rest string) (auth, tail string) {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return rest[:i], rest[i:]
	}
	return rest, ""
}

func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}
