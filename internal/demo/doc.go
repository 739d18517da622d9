// Package demo holds what `tollgate serve` uses when it is given no
// configuration: an embedded policies.yml serving the example policies, the
// example policies' modules (copied into modules/ by `make demo-modules`),
// and the sample requests `tollgate serve --demo` sends to itself.
//
// It knows nothing of how policies run or are served; it only provides
// bytes.
package demo
