package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// APIServer is a further kube-apiserver of the cluster, started by [Cluster.StartAPIServer].
type APIServer struct {
	// Server is its URL (https://127.0.0.1:PORT, the cluster's CA signed its certificate);
	// Kubeconfig a kubeconfig for the admin user against it.
	Server, Kubeconfig string
	// StartDuration is how long it took from its start to /readyz answering ok.
	StartDuration time.Duration

	c *Cluster
	p *process
}

// StartAPIServer runs another kube-apiserver beside the cluster's, as a highly available control
// plane does: on the same etcd, with the first one's certificates, tokens and flags and extra on
// top of them (by flag name), on a free port of 127.0.0.1. It stays out of the `kubernetes`
// Service's endpoints (--endpoint-reconciler-type=none; the Service itself is written only by the
// apiserver that creates it), so in-cluster clients keep reaching the first one, and without an
// identity Lease (APIServerIdentity off: the Lease is named after the host, which both share,
// and the two would overwrite each other's; UnknownVersionInteroperabilityProxy, which needs it,
// off too: both are of one version). Both serve the
// same objects, and each runs its own admission with the same webhook configurations: a test
// gives this one what the suite's apiserver should not have, e.g. another --tracing-config-file,
// and sends its requests here. name names its log, Dir/name.log. Stop it with Stop; the
// cluster's Stop stops it too.
func (c *Cluster) StartAPIServer(ctx context.Context, name string, extra ...string) (*APIServer, error) {
	if c.apiserverFlags == nil {
		return nil, fmt.Errorf("cluster: no kube-apiserver to run another beside")
	}
	token, err := os.ReadFile(filepath.Join(c.Dir, "admin.token"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CA.CertPEM)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	auth := http.Header{"Authorization": {"Bearer " + string(token)}}
	a := &APIServer{c: c, Kubeconfig: filepath.Join(c.Dir, name+".kubeconfig")}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		a.Server = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		flags := mergeFlags(c.apiserverFlags, []string{
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--endpoint-reconciler-type=none",
			// its identity Lease is named after the host's name: the first one's (and the
			// peer proxy, for apiservers of other versions, needs an identity)
			featureGates(c.apiserverFlags, "APIServerIdentity=false,UnknownVersionInteroperabilityProxy=false"),
		})
		flags = mergeFlags(flags, extra)
		begin := time.Now()
		a.p, err = startProcess(c.Dir, name, c.Binaries.KubeAPIServer, flags...)
		if err != nil {
			return nil, err
		}
		err = waitFor(ctx, 60*time.Second, a.p, func() error {
			return getOK(hc, a.Server+"/readyz", auth, "ok")
		})
		if err == nil {
			a.StartDuration = time.Since(begin)
			break
		}
		_ = a.p.stop(5 * time.Second)
		if attempt == portAttempts || !a.p.portTaken() {
			return nil, err
		}
		c.logf("cluster: %s: its port was taken, retrying on another", name)
	}
	if err := os.WriteFile(a.Kubeconfig, []byte(kubeconfig(a.Server, c.CA.CertPEM, string(token))), 0o600); err != nil {
		_ = a.p.stop(5 * time.Second)
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.extraMu.Lock()
	c.extra = append(c.extra, a.p)
	c.extraMu.Unlock()
	c.logf("cluster: %s ready at %s after %v", name, a.Server, a.StartDuration.Round(time.Millisecond))
	return a, nil
}

// featureGates is a --feature-gates flag holding those of flags and gate.
func featureGates(flags []string, gate string) string {
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--feature-gates="); ok && v != "" {
			return f + "," + gate
		}
	}
	return "--feature-gates=" + gate
}

// Kubectl runs the real kubectl against this apiserver, with stdin (nil for none).
func (a *APIServer) Kubectl(ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	return a.c.kubectl(ctx, a.Kubeconfig, stdin, args...)
}

// Stop stops the apiserver (SIGTERM, its graceful shutdown, SIGKILL after 15 s). It is safe to
// call more than once.
func (a *APIServer) Stop() error {
	a.c.extraMu.Lock()
	a.c.extra = slices.DeleteFunc(a.c.extra, func(p *process) bool { return p == a.p })
	a.c.extraMu.Unlock()
	return a.p.stop(15 * time.Second)
}

// LogTail returns the last n lines of its log.
func (a *APIServer) LogTail(n int) string {
	return fmt.Sprintf("--- last %d lines of %s ---\n%s\n", n, a.p.logPath, a.p.tail(n))
}
