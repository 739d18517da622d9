package serve

import (
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

// withPoliciesConfigMap sets so.API to a watch of the PoliciesConfigMap ConfigMap's
// policies.yml (nothing without it). Content from the API is parsed as the file is
// (sources.yml is read at start only, so it is not watched).
func withPoliciesConfigMap(o Options, so *server.Options, sources config.Sources) error {
	ref := o.PoliciesConfigMap
	if ref == "" {
		return nil
	}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--policies-configmap=%s: %w: want NAMESPACE/NAME", ref, config.ErrInvalid)
	}
	rc, err := kubeclient.Config(o.Kubeconfig, o.Context)
	if err != nil && o.Kubeconfig == "" && o.Context == "" {
		// Not in a cluster (or no token mounted) and no kubeconfig: the API path is an
		// improvement, never a requirement; the mounted file serves alone.
		o.Logger.Warn("--policies-configmap: no Kubernetes client configuration; serving the --policies file only", "configmap", ref, "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("--policies-configmap: kubeconfig: %w", err)
	}
	rc = rest.AddUserAgent(rest.CopyConfig(rc), "tollgate-serve")
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--policies-configmap: %w", err)
	}
	what := "configmap " + ref + " " + v1.PoliciesKey
	opts := o.Config
	so.API = server.ConfigMapSource(cs, ns, name, v1.PoliciesKey, o.Logger.With("configmap", ref))
	so.ParseAPI = func(b []byte) (*config.Config, error) {
		pols, warns, err := config.ParsePolicies(what, b)
		if err != nil {
			return nil, err
		}
		return &config.Config{Options: opts, Policies: pols, Warnings: warns, Sources: sources, Source: b}, nil
	}
	o.Logger.Info("watching the policies' ConfigMap through the Kubernetes API", "configmap", ref, "host", rc.Host)
	return nil
}
