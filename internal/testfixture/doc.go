// Package testfixture finds the policy modules that `make policies` builds, for
// tests anywhere in the repository. A missing module fails the test with the
// command that builds it: tests never skip because a fixture is absent.
package testfixture
