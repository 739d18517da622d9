package kubelet

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// tokenLifetime is the lifetime of a replica's ServiceAccount token (no rotation: a test lasts
// less).
const tokenLifetime = time.Hour

// writeKubeconfig requests a token for p's ServiceAccount (spec.serviceAccountName, else
// "default") and writes a kubeconfig with it into p's directory; it returns the file's path.
func (r *runner) writeKubeconfig(p *pod) (string, error) {
	sa := p.template.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ctx, cancel := context.WithTimeout(r.k.ctx, 10*time.Second)
	defer cancel()
	tr, err := r.k.opts.Client.CoreV1().ServiceAccounts(r.k.opts.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s: %w", sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: r.k.opts.API.Server, CertificateAuthorityData: r.k.opts.API.CAData}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: sa, Namespace: r.k.opts.Namespace}
	cfg.CurrentContext = "e2e"
	path := filepath.Join(p.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}
