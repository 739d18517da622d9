// Package wasmbin reads and rewrites the section structure of a WebAssembly
// binary: it lists exports and custom sections, replaces a custom section, and
// instruments code with an interrupt check (Instrument), for which it decodes
// every instruction of the code section.
//
// It knows the binary format, not what runs it: it must not know about
// engines, waPC, Kubewarden or Kubernetes.
package wasmbin
