package cluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configure [Start]. The zero value is usable.
type Options struct {
	// Binaries to run; empty fields are found as the package documentation says.
	Binaries Binaries
	// Dir holds the data, certificates, kubeconfig and logs. Empty: a new temporary directory,
	// removed by Stop unless KeepDir.
	Dir     string
	KeepDir bool
	// ServiceClusterIPRange is kube-apiserver's --service-cluster-ip-range (default 10.96.0.0/16).
	ServiceClusterIPRange string
	// APIServerFlags are added to (and, by flag name, override) the default kube-apiserver flags.
	APIServerFlags []string
	// StartTimeout bounds the wait for etcd and for /readyz (default 60 s).
	StartTimeout time.Duration
	// Logf receives progress lines (e.g. testing.T.Logf); nil discards them.
	Logf func(format string, args ...any)
	// Node makes it a one-node cluster (see node.go): containerd, the kubelet,
	// kube-controller-manager, kube-scheduler, kube-proxy, a CNI bridge and a registry beside etcd
	// and kube-apiserver, on the fixed addresses NodeIP, APIServerPort and RegistryPort. Only
	// inside the namespaces that Isolated makes.
	Node bool
}

// Cluster is a running etcd and kube-apiserver. Its admin user is in system:masters.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig for the admin user (what kubectl and the operator use).
	Kubeconfig string
	// Config is the admin's client configuration; Client is a clientset built from it.
	Config *rest.Config
	Client kubernetes.Interface
	// Dir holds everything the cluster writes, including etcd.log and kube-apiserver.log.
	Dir string
	// Binaries are the binaries in use.
	Binaries Binaries
	// Server is the apiserver's URL; CA signed its serving certificate.
	Server string
	CA     *CA
	// StartDuration is how long Start took from launching etcd to /readyz answering ok;
	// NodeStartDuration how long the node then took to be Ready (Options.Node).
	StartDuration     time.Duration
	NodeStartDuration time.Duration
	// ContainerdSocket is the node's CRI endpoint (Options.Node).
	ContainerdSocket string

	removeDir bool
	logf      func(string, ...any)
	etcd      *process
	apiserver *process
	// apiserverFlags are the first kube-apiserver's flags; extra are the further ones that
	// StartAPIServer runs and that have not stopped yet.
	apiserverFlags []string
	extraMu        sync.Mutex
	extra          []*process
	node           node
	nodeMode       bool
	stopOnce       sync.Once
	stopErr        error
}

// AdminUser is the admin's user name; its token is in the kubeconfig.
const AdminUser = "e2e-admin"

// Start runs etcd and kube-apiserver on loopback and returns once /readyz is ok. On error nothing
// is left running and the error includes the tail of the failing process's log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.ServiceClusterIPRange == "" {
		opts.ServiceClusterIPRange = "10.96.0.0/16"
	}
	if opts.Node {
		opts.ServiceClusterIPRange = ServiceCIDR
	}
	bins, err := ResolveBinaries(ctx, opts.Binaries, opts.Node, logf)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: opts.Dir, Binaries: bins, logf: logf, nodeMode: opts.Node}
	if c.Dir != "" {
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	} else {
		if c.Dir, err = os.MkdirTemp("", "tollgate-e2e-cluster-"); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		c.removeDir = !opts.KeepDir
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()

	begin := time.Now()
	etcdURL, err := c.startEtcd(ctx, opts, logf)
	if err != nil {
		return nil, err
	}
	logf("cluster: etcd ready at %s after %v", etcdURL, time.Since(begin).Round(time.Millisecond))
	if err := c.writeAPIServerFiles(); err != nil {
		return nil, err
	}
	token, err := os.ReadFile(filepath.Join(c.Dir, "admin.token"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := c.startAPIServer(ctx, opts, etcdURL, string(token), logf); err != nil {
		return nil, err
	}
	c.StartDuration = time.Since(begin)
	logf("cluster: kube-apiserver ready at %s after %v (dir %s)", c.Server, c.StartDuration.Round(time.Millisecond), c.Dir)

	c.Config = &rest.Config{
		Host:            c.Server,
		BearerToken:     string(token),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CA.CertPEM},
		QPS:             100,
		Burst:           200,
		// Server warnings (e.g. "FQDN endpoints are deprecated") go to Logf, not to klog's stderr.
		WarningHandler: warningLogger(logf),
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("cluster: clientset: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, []byte(kubeconfig(c.Server, c.CA.CertPEM, string(token))), 0o600); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if opts.Node {
		if err := c.startNode(ctx, opts, logf); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// portAttempts is how often a process is started on new free ports when another process took a
// port between freePort's check and the bind (tests in other packages run at the same time).
const portAttempts = 3

// startEtcd runs etcd on free loopback ports and returns its client URL once /health is ok.
func (c *Cluster) startEtcd(ctx context.Context, opts Options, logf func(string, ...any)) (string, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return "", err
		}
		if c.nodeMode { // alone in its network namespace
			ports = []int{2379, 2380}
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		dataDir := filepath.Join(c.Dir, "etcd-data")
		if err := os.RemoveAll(dataDir); err != nil {
			return "", fmt.Errorf("cluster: %w", err)
		}
		c.etcd, err = startProcess(c.Dir, "etcd", c.Binaries.Etcd,
			"--name=e2e",
			"--data-dir="+dataDir,
			"--listen-client-urls="+clientURL,
			"--advertise-client-urls="+clientURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=e2e="+peerURL,
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		)
		if err != nil {
			return "", err
		}
		err = waitFor(ctx, opts.StartTimeout, c.etcd, func() error {
			return getOK(hc, clientURL+"/health", nil, `"health":"true"`)
		})
		if err == nil {
			return clientURL, nil
		}
		if attempt == portAttempts || !c.etcd.portTaken() {
			return "", err
		}
		logf("cluster: etcd: a port was taken, retrying on others")
		_ = c.etcd.stop(5 * time.Second)
	}
}

// startAPIServer runs kube-apiserver on a free loopback port and sets c.Server once /readyz is ok.
func (c *Cluster) startAPIServer(ctx context.Context, opts Options, etcdURL, token string, logf func(string, ...any)) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CA.CertPEM)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	auth := http.Header{"Authorization": {"Bearer " + token}}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		c.Server = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		base := []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
			"--tls-cert-file=" + filepath.Join(c.Dir, "apiserver.crt"),
			"--tls-private-key-file=" + filepath.Join(c.Dir, "apiserver.key"),
			"--token-auth-file=" + filepath.Join(c.Dir, "tokens.csv"),
			"--authorization-mode=RBAC",
			"--service-cluster-ip-range=" + opts.ServiceClusterIPRange,
			// Webhooks dial the Service's EndpointSlice (which PublishEndpoints writes), not its ClusterIP.
			"--enable-aggregator-routing=true",
			// No controller-manager creates service accounts' tokens.
			"--disable-admission-plugins=ServiceAccount",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + filepath.Join(c.Dir, "sa.pub"),
			"--service-account-signing-key-file=" + filepath.Join(c.Dir, "sa.key"),
			"--allow-privileged=true",
			"--profiling=false",
		}
		if c.nodeMode {
			c.Server = "https://127.0.0.1:" + strconv.Itoa(APIServerPort)
			base = mergeFlags(base, []string{
				// Pods reach it at the `kubernetes` Service, which kube-proxy sends to NodeIP.
				"--bind-address=0.0.0.0",
				"--advertise-address=" + NodeIP,
				"--secure-port=" + strconv.Itoa(APIServerPort),
				"--authorization-mode=Node,RBAC",
				// The ServiceAccount admission plugin back on: kube-controller-manager makes the
				// accounts, and pods get their projected tokens.
				"--disable-admission-plugins=",
				"--enable-admission-plugins=NodeRestriction",
				"--client-ca-file=" + filepath.Join(c.Dir, "ca.crt"),
				"--kubelet-client-certificate=" + filepath.Join(c.Dir, "apiserver-kubelet-client.crt"),
				"--kubelet-client-key=" + filepath.Join(c.Dir, "apiserver-kubelet-client.key"),
				// The node's name does not resolve (no DNS): dial its InternalIP.
				"--kubelet-preferred-address-types=InternalIP",
			})
		}
		flags := mergeFlags(base, opts.APIServerFlags)
		c.apiserverFlags = flags
		c.apiserver, err = startProcess(c.Dir, "kube-apiserver", c.Binaries.KubeAPIServer, flags...)
		if err != nil {
			return err
		}
		err = waitFor(ctx, opts.StartTimeout, c.apiserver, func() error {
			return getOK(hc, c.Server+"/readyz", auth, "ok")
		})
		if err == nil {
			return nil
		}
		if attempt == portAttempts || !c.apiserver.portTaken() {
			return err
		}
		logf("cluster: kube-apiserver: its port was taken, retrying on another")
		_ = c.apiserver.stop(5 * time.Second)
	}
}

// writeAPIServerFiles writes the CA-signed serving certificate, the static token file (the admin
// in system:masters) and the service-account signing key into Dir.
func (c *Cluster) writeAPIServerFiles() error {
	var err error
	if c.CA, err = NewCA("tollgate-e2e-ca"); err != nil {
		return err
	}
	hosts := []string{"127.0.0.1", "localhost", "kubernetes.default.svc"}
	if c.nodeMode {
		// In-cluster clients dial the `kubernetes` Service's ClusterIP and check it.
		hosts = append(hosts, NodeIP, KubernetesServiceIP, "kubernetes", "kubernetes.default", "kubernetes.default.svc.cluster.local")
	}
	certPEM, keyPEM, err := c.CA.ServingCert(hosts...)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("cluster: service-account key: %w", err)
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return fmt.Errorf("cluster: service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return fmt.Errorf("cluster: service-account key: %w", err)
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("cluster: token: %w", err)
	}
	token := hex.EncodeToString(tok)
	files := map[string][]byte{
		"ca.crt":        c.CA.CertPEM,
		"apiserver.crt": certPEM,
		"apiserver.key": keyPEM,
		"sa.key":        pemBlock("EC PRIVATE KEY", saDER),
		"sa.pub":        pemBlock("PUBLIC KEY", saPub),
		"admin.token":   []byte(token),
		// token,user,uid,"group,..."
		"tokens.csv": fmt.Appendf(nil, "%s,%s,%s,\"system:masters\"\n", token, AdminUser, AdminUser),
	}
	if c.nodeMode {
		for _, nt := range nodeTokens {
			if _, err := rand.Read(tok); err != nil {
				return fmt.Errorf("cluster: token: %w", err)
			}
			t := hex.EncodeToString(tok)
			files[nt.file] = []byte(t)
			files["tokens.csv"] = fmt.Appendf(files["tokens.csv"], "%s,%s,%s,%q\n", t, nt.user, nt.user, nt.groups)
		}
		// The apiserver's identity towards the kubelet (logs, exec): x509, in system:masters.
		crt, key, err := c.CA.ClientCert("kube-apiserver-kubelet-client", "system:masters")
		if err != nil {
			return err
		}
		files["apiserver-kubelet-client.crt"], files["apiserver-kubelet-client.key"] = crt, key
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), data, 0o600); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	return nil
}

// ImpersonatedConfig returns a copy of the admin's configuration that acts as user in groups (the
// admin may impersonate anyone), so a test can check what a least-privilege identity, e.g. an
// operator's service account "system:serviceaccount:NS:NAME", may do under RBAC.
func (c *Cluster) ImpersonatedConfig(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// Kubectl runs the real kubectl with the cluster's kubeconfig.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return c.KubectlWithInput(ctx, nil, args...)
}

// KubectlWithInput runs kubectl with stdin (e.g. a manifest for `apply -f -`).
func (c *Cluster) KubectlWithInput(ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	return c.kubectl(ctx, c.Kubeconfig, stdin, args...)
}

func (c *Cluster) kubectl(ctx context.Context, kubeconfig string, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, c.Binaries.Kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), errb.String(), fmt.Errorf("cluster: kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), nil
}

// Stop stops kube-apiserver, then etcd (the other order leaves the apiserver retrying a dead etcd),
// and removes Dir if Start created it. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		c.extraMu.Lock()
		extra := c.extra
		c.extra = nil
		c.extraMu.Unlock()
		for _, p := range append(append(extra, c.nodeProcesses()...), c.apiserver, c.etcd) {
			if p != nil {
				begin := time.Now()
				errs = append(errs, p.stop(15*time.Second))
				c.logf("cluster: %s stopped in %v", p.name, time.Since(begin).Round(time.Millisecond))
			}
		}
		if c.nodeMode {
			errs = append(errs, c.stopNodeLeftovers())
			// The bridge goes too, so that a later node cluster in the same namespaces can make it.
			_ = exec.Command("ip", "link", "del", bridgeName).Run()
		}
		if c.removeDir {
			errs = append(errs, os.RemoveAll(c.Dir))
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// LogTail returns the last n lines of kube-apiserver's and etcd's logs, for failure messages.
func (c *Cluster) LogTail(n int) string {
	var b strings.Builder
	for _, p := range append(c.nodeProcesses(), c.apiserver, c.etcd) {
		if p != nil {
			fmt.Fprintf(&b, "--- last %d lines of %s ---\n%s\n", n, p.logPath, p.tail(n))
		}
	}
	return b.String()
}

func kubeconfig(server string, caPEM []byte, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: %s
current-context: e2e
`, server, base64.StdEncoding.EncodeToString(caPEM), AdminUser, token, AdminUser)
}

// warningLogger passes the apiserver's warnings to logf.
type warningLogger func(string, ...any)

func (l warningLogger) HandleWarningHeader(_ int, _ string, text string) {
	l("cluster: apiserver warning: %s", text)
}

// mergeFlags appends extra to base; a flag in extra replaces base's flag of the same name.
func mergeFlags(base, extra []string) []string {
	name := func(f string) string { n, _, _ := strings.Cut(f, "="); return n }
	override := map[string]bool{}
	for _, f := range extra {
		override[name(f)] = true
	}
	var out []string
	for _, f := range base {
		if !override[name(f)] {
			out = append(out, f)
		}
	}
	return append(out, extra...)
}

// freePorts returns n distinct free loopback ports (held open together so they differ).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster: free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitFor polls probe every 100 ms until it succeeds, p exits, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, p *process, probe func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = probe(); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("cluster: %s exited before it was ready: %v\n--- last 40 lines of %s ---\n%s",
				p.name, p.waitErr, p.logPath, p.tail(40))
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s not ready after %v: %v (%w)\n--- last 40 lines of %s ---\n%s",
				p.name, timeout, last, ctx.Err(), p.logPath, p.tail(40))
		case <-tick.C:
		}
	}
}

func getOK(hc *http.Client, url string, h http.Header, want string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// process is a child process whose stdout and stderr go to Dir/<name>.log.
type process struct {
	name, logPath string
	logStart      int64 // the log's size before this run: earlier runs' lines are not this one's
	cmd           *exec.Cmd
	done          chan struct{}
	waitErr       error
}

func startProcess(dir, name, bin string, args ...string) (*process, error) {
	p := &process{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if st, err := logf.Stat(); err == nil {
		p.logStart = st.Size()
	}
	fmt.Fprintf(logf, "+ %s %s\n", bin, strings.Join(args, " "))
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("cluster: starting %s (%s): %w", name, bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, then SIGKILL after grace. An exit caused by the signal is not an error.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil // exited earlier; its error was reported when it mattered
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("cluster: %s did not stop within %v of SIGTERM; killed", p.name, grace)
}

// portTaken reports whether the process exited because a port it was to listen on was in use.
func (p *process) portTaken() bool {
	select {
	case <-p.done:
	default:
		return false
	}
	data, err := os.ReadFile(p.logPath)
	return err == nil && int64(len(data)) >= p.logStart && bytes.Contains(data[p.logStart:], []byte("address already in use"))
}

func (p *process) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return tail(data, n)
}

// tail returns the last n lines of data.
func tail(data []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
