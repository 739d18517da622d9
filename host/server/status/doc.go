// Package status is the wire shape of GET /policies on the probe port of
// `tollgate serve`: which policies.yml the server serves (by digest), the
// outcome of its last reload, and the state of every policy. The server
// writes it; the Kubernetes operator reads it to decide when a policy is
// active.
//
// It knows nothing of Wasm, of how policies are loaded or evaluated, or of
// HTTP: importing it pulls in the standard library only.
package status
