// Package tinygoprobe holds two programs that tell which of the MAP module's
// building blocks TinyGo can build and run (issue 24: a MAP module compiled
// by TinyGo would be smaller and faster). cel/ compiles and evaluates a CEL
// expression with cel-go alone (no k8s.io/apiserver), as the apiserver's
// environment would on an object; pod/ decodes a Pod into client-go's typed
// struct with sigs.k8s.io/json, encodes it again and converts it to
// unstructured content (apimachinery, no k8s.io/apiserver). Build and run
// each with scripts/map-tinygo-probe.sh's TinyGo:
//
//	tinygo build -target=wasip1 -scheduler=none -no-debug -o /tmp/cel.wasm ./internal/tinygoprobe/cel
//	wazero run /tmp/cel.wasm
//
// They print "ok" and what they computed, or the first failure. Nothing
// imports this package; it must not know about the engine.
package tinygoprobe
