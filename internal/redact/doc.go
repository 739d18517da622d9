// Package redact hides credentials in module URIs and in text that may
// quote them (errors, log lines, GET /policies, CLI output): the userinfo of
// a URI (https://user:pw@host/x.wasm, registry://token@host/repo) and the
// values of query parameters whose names look like credentials (token, sig,
// signature, bearer, X-Amz-*, password, ...: see CredentialKey), and the whole
// #fragment (never sent to a server, so tollgate never needs it, and where
// OAuth's implicit flow puts its access_token).
//
// It works on strings only, so that any package may call it where it prints
// a URI or an error that may carry one; it does not know how modules are
// fetched, which schemes tollgate supports, or where the text goes. Redacted
// text is for people: it never goes back to a fetcher.
package redact
