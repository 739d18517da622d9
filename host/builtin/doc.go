// Package builtin holds the Wasm modules compiled into the tollgate binary,
// addressed as builtin://NAME (e.g. builtin://mutating-admission-policy).
//
// The modules are embedded from modules/*.wasm, which scripts/embed-builtins.sh
// copies from the built policies under policies/ (make policies). A binary
// built before that has no built-in modules, and Module says so.
//
// This package owns only the embedded bytes and their names. It must not know
// how modules are compiled, run or resolved (host/module resolves builtin://
// through Module).
package builtin
