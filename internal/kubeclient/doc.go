// Package kubeclient loads a Kubernetes client configuration the same way for every tollgate
// command that talks to a cluster (controller, serve, run and bench). It knows nothing else.
package kubeclient
