// Package helmchart tests the Helm chart charts/tollgate with the pinned helm that
// scripts/install-k8s-tools.sh builds (the tests fail, never skip, when it cannot): helm lint
// --strict, helm template with the default values and with a values file that sets every value,
// every rendered object decoded strictly into its Go type and checked (least-privilege RBAC, the
// controller's flags, the default PolicyServer), values.schema.json refusing bad values, and the
// chart's CRDs being exact copies of crds/.
//
// It knows nothing of a cluster: test/e2e applies the rendered chart to a real kube-apiserver.
package helmchart
