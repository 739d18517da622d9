// Package wasmenc writes and reads the primitives of the WebAssembly binary
// format: the header, LEB128 integers, names, vectors and sections. It is the
// one encoder of those bytes: host/wasm/wasmbin, which reads and rewrites
// modules, and the fixtures that build modules for tests
// (internal/testfixture/hostile) both use it.
//
// It is a leaf: it must not know what a module means (instructions, types,
// engines, waPC) and must not import anything of tollgate.
package wasmenc
