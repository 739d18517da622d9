// Package oci distributes policy modules as OCI artifacts: it parses
// registry:// module URIs, pushes a Wasm module to a registry in Kubewarden's
// artifact layout, pulls modules (Kubewarden's layout and the CNCF Wasm
// layout) into a local content-addressed store, and saves/loads store
// bundles for air-gapped clusters.
//
// It owns: the registry:// URI grammar, registry transport configuration
// (sources.yml compiled to certificate pools, Docker credentials, proxies
// from the environment), the on-disk store (an OCI image layout) and its
// index, and [Lazy], a client opened on first use. The sources.yml syntax
// is host/config's.
//
// It must NOT know about: Wasm execution, waPC, policies.yml, Kubernetes
// admission, or the CLI. The loader (host/module) calls [Client.Fetch]; the
// CLI calls Pull, Push, Store and bundle functions. The registry protocol
// itself is oras.land/oras-go/v2's; this package only chooses what to send
// and checks what comes back.
package oci
