// Package layout checks which way the root module's dependencies point: the leaf helpers under
// internal/ import neither the policy host (host/) nor an application (cmd/, crds/controller,
// crds/audit), and host/ imports no application.
//
// It reads import lines with go/parser; it knows the repository's folders, not what the packages
// do.
package layout
