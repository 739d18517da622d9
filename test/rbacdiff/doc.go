// Package rbacdiff checks the CEL authorizer of the mutating-admission-policy
// module against Kubernetes' own: the RBAC authorizer of k8s.io/kubernetes
// (plugin/pkg/auth/authorizer/rbac, over client-go listers) behind the
// apiserver's privileged-group authorizer, chained with the apiserver's union
// authorizer, and the clusterrole-aggregation controller of
// kube-controller-manager for aggregated ClusterRoles. Both sides get the
// same RBAC objects; every check of a generated set must get the same
// decision and reason.
//
// It is its own module because k8s.io/kubernetes can only be required with a
// replace for each of its staging modules; the tollgate modules must not
// carry that.
package rbacdiff
