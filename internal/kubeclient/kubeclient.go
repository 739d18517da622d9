package kubeclient

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config returns the client configuration of kubeconfig and kubeContext. With neither, the
// in-cluster configuration comes first, then $KUBECONFIG or ~/.kube/config. No old kubeconfig is
// migrated: the default rules would stat the home directory, which fails in a pod whose HOME is
// not a directory (readOnlyRootFilesystem). Errors are clientcmd's, for the caller to put in context.
func Config(kubeconfig, kubeContext string) (*rest.Config, error) {
	if kubeconfig == "" && kubeContext == "" {
		if c, err := rest.InClusterConfig(); err == nil {
			return c, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rules.MigrationRules = nil
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, err
	}
	return c, nil
}
