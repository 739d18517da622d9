// Package gkdiff is the differential suite of the built-in
// gatekeeper-mutation module (see the package's doc in doc.go's final form).
package gkdiff
