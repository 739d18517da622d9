// Package gkdiff is the differential suite of the built-in gatekeeper-mutation
// module: the same mutators and requests run by OPA Gatekeeper's own code
// (v3.23.1 pkg/mutation and the webhook's rules, reference.go, with the
// mutator CRDs' structural schemas applied as the apiserver would) and by
// both tollgate sides, the engine natively (native.go) and the TinyGo-built
// module through the real policy host (side.go, wasm.go), compared as
// outcomes: settings refused or not, request rejected or not, and the mutated
// object as a JSON value.
//
// Inputs:
//   - testdata/cases/*.yaml: hand-written cases, one concern per file
//     (locations, pathTests, match, the four mutators, the system loop, the
//     webhook's rules, regressions the fuzz found), over testdata/objects.yaml;
//     TestCases runs them, TestCaseGuards checks each case's guards against
//     Gatekeeper alone, so that a case that no longer tests its rule fails;
//   - gen.go: seeded random mutator sets and objects; TestFuzzDifferential
//     runs a fixed number of trials in every go test (GKDIFF_FUZZ_TRIALS and
//     GKDIFF_FUZZ_SEED for longer runs), FuzzDifferential under go's fuzzer,
//     TestFuzzDifferentialFromCluster with the namespaces read through the
//     kubernetes host capability (cluster.go);
//   - testdata/known-differences.yaml: differences that are known and not
//     fixed; it is empty, and the suite fails when a listed case agrees.
//
// GKDIFF_MODULE points at another build of the module, GKDIFF_CRDS at another
// copy of Gatekeeper's CRDs. bench_test.go measures Gatekeeper's webhook work,
// the native engine and the module side by side (make bench).
//
// The reference side must not use the engine's packages, only Gatekeeper's,
// so that a mistake shared by both cannot hide a difference; and the suite
// must not know how the module is built or embedded (it reads the built file).
package gkdiff
