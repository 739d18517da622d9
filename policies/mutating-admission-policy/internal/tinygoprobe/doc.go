// Package tinygoprobe holds programs that tell which of the MAP module's
// building blocks TinyGo can build and run (issues 24 and 31: a MAP module
// compiled by TinyGo would be smaller and faster). cel/ compiles and evaluates
// a CEL expression with cel-go alone (no k8s.io/apiserver), as the apiserver's
// environment would on an object; celk8s/ adds the Kubernetes CEL libraries
// that need no net/http; smd/ merges an apply configuration with
// structured-merge-diff (list-map by key, atomic list); pod/ decodes a Pod into
// client-go's typed struct with sigs.k8s.io/json, encodes it again and converts
// it to unstructured content (apimachinery, no k8s.io/apiserver; it still needs
// net/http). Build and run them against the build-time patches of
// scripts/tinygo-patches with `make map-tinygo` (scripts/build-map-tinygo.sh
// --check), or one of them:
//
//	scripts/build-map-tinygo.sh -o /tmp/cel.wasm policies/mutating-admission-policy/internal/tinygoprobe/cel
//	go run ./internal/tools/wasirun /tmp/cel.wasm
//
// They print "ok" and what they computed, or the first failure. Nothing
// imports this package; it must not know about the engine.
package tinygoprobe
