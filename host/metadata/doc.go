// Package metadata reads, validates and writes Kubewarden policy metadata: the
// JSON document stored in a module's `io.kubewarden.metadata` custom section,
// written from a metadata.yml by `tollgate annotate` (or `kwctl annotate`).
//
// It must not know how modules are run or fetched: it works on bytes.
package metadata
