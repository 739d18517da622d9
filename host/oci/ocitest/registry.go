package ocitest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/pki"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	"golang.org/x/crypto/bcrypt"
)

// RegistryBinary is Debian's docker-registry (CNCF distribution 2.8).
var RegistryBinary = "/usr/bin/docker-registry"

// Options choose how the registry runs.
type Options struct {
	// TLS serves HTTPS with a certificate from a CA generated for the test
	// (given to clients through SourcesPath); otherwise plain HTTP, listed in
	// insecure_sources.
	TLS bool
	// Auth requires HTTP basic authentication (htpasswd, bcrypt).
	Auth bool
}

// Registry is a running registry.
type Registry struct {
	// Host is 127.0.0.1:PORT.
	Host string
	// Dir holds the registry's storage, config and credentials files.
	Dir string
	// CAPEM is the CA certificate (TLS only).
	CAPEM []byte
	// SourcesPath is a sources.yml for this registry: source_authorities with
	// the CA (TLS), or insecure_sources with the host (plain HTTP).
	SourcesPath string
	// DockerConfigPath is a Docker config.json with the right credentials
	// (Auth), or with none.
	DockerConfigPath string
	// Username and Password are the valid credentials (Auth).
	Username, Password string

	cfgPath, scheme string
	tls             bool
	logs            *testfixture.SyncBuffer

	mu  sync.Mutex
	cmd *exec.Cmd
}

// RequireRegistry fails the test, naming `make tools`, when the registry
// binary is not installed. It never skips.
func RequireRegistry(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(RegistryBinary); err != nil {
		t.Fatalf("%s not found (%v): the OCI tests need Debian's docker-registry package; run `make tools`", RegistryBinary, err)
	}
}

// Start runs a registry on a free 127.0.0.1 port until the test ends.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	RequireRegistry(t)
	dir := t.TempDir()
	r := &Registry{Dir: dir, Host: "127.0.0.1:" + strconv.Itoa(freePort(t)), logs: &testfixture.SyncBuffer{}}
	storage := filepath.Join(dir, "storage")
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: tollgate-test-secret
  headers:
    X-Content-Type-Options: [nosniff]
`, storage, r.Host)
	scheme := "http"
	if opts.TLS {
		scheme = "https"
		caPEM, certPEM, keyPEM := certificates(t)
		r.CAPEM = caPEM
		writeFile(t, filepath.Join(dir, "cert.pem"), append(certPEM, caPEM...))
		writeFile(t, filepath.Join(dir, "key.pem"), keyPEM)
		writeFile(t, filepath.Join(dir, "ca.pem"), caPEM)
		cfg += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
		r.SourcesPath = filepath.Join(dir, "sources.yml")
		writeFile(t, r.SourcesPath, fmt.Appendf(nil, "source_authorities:\n  %q:\n    - type: Path\n      path: %s\n", r.Host, filepath.Join(dir, "ca.pem")))
	} else {
		r.SourcesPath = filepath.Join(dir, "sources.yml")
		writeFile(t, r.SourcesPath, fmt.Appendf(nil, "insecure_sources:\n  - %q\n", r.Host))
	}
	r.DockerConfigPath = filepath.Join(dir, "docker-config.json")
	if opts.Auth {
		r.Username, r.Password = "tollgate", "s3cret-"+strconv.Itoa(r.port())
		hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "htpasswd"), fmt.Appendf(nil, "%s:%s\n", r.Username, hash))
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: tollgate-test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
		writeFile(t, r.DockerConfigPath, DockerConfig(r.Host, r.Username, r.Password))
	} else {
		writeFile(t, r.DockerConfigPath, []byte(`{"auths":{}}`))
	}
	cfgPath := filepath.Join(dir, "config.yml")
	writeFile(t, cfgPath, []byte(cfg))

	r.cfgPath, r.scheme, r.tls = cfgPath, scheme, opts.TLS
	r.run(t)
	return r
}

// run starts the registry process and waits until it answers.
func (r *Registry) run(t testing.TB) {
	t.Helper()
	cmd := exec.Command(RegistryBinary, "serve", r.cfgPath)
	cmd.Stdout, cmd.Stderr = r.logs, r.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", RegistryBinary, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("registry %s log:\n%s", r.Host, r.logs.String())
		}
	})

	client := &http.Client{Timeout: time.Second}
	if r.tls {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(r.CAPEM)
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("registry exited at start: %v\n%s", err, r.logs.String())
		default:
		}
		resp, err := client.Get(r.scheme + "://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry on %s not ready after 20s: %v\n%s", r.Host, err, r.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart starts the registry again after Stop, on the same port and storage.
func (r *Registry) Restart(t testing.TB) {
	t.Helper()
	r.run(t)
}

func (r *Registry) port() int {
	_, p, _ := net.SplitHostPort(r.Host)
	n, _ := strconv.Atoi(p)
	return n
}

// URI returns registry://HOST/repo.
func (r *Registry) URI(repo string) string { return "registry://" + r.Host + "/" + repo }

// Stop kills the registry now (to test an unreachable registry) and waits
// until its port is closed.
func (r *Registry) Stop() {
	r.mu.Lock()
	cmd := r.cmd
	r.mu.Unlock()
	_ = cmd.Process.Kill()
	for range 100 {
		c, err := net.DialTimeout("tcp", r.Host, 100*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
}

// DockerConfig returns a Docker config.json giving user:password for host.
func DockerConfig(host, user, password string) []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{
		host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password))},
	}})
	return b
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// certificates makes a CA and a server certificate for 127.0.0.1/localhost, valid a day.
func certificates(t testing.TB) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA(pki.Template{CommonName: "tollgate test CA", Serial: big.NewInt(1),
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	crt, err := ca.Issue(pki.Template{CommonName: "127.0.0.1", Hosts: []string{"127.0.0.1", "localhost"}, Usage: pki.ServerAuth,
		Serial: big.NewInt(2), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if keyPEM, err = crt.KeyPEM(pki.SEC1); err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM, crt.CertPEM, keyPEM
}
