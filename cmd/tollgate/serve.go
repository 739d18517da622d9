package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/serve"
	"github.com/tollgate-dev/tollgate/host/telemetry"
	"github.com/tollgate-dev/tollgate/internal/demo"
)

func newServeCmd() *cobra.Command {
	o := config.Defaults()
	var sendDemo, demoExit bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve policies as an HTTPS admission webhook (Kubewarden policy-server compatible)",
		Long: `serve runs the policies of a Kubewarden policies.yml as an admission webhook:
POST /validate/{id}, /validate_raw/{id} and /audit/{id} over HTTPS on --port, and
GET /readiness, /livez, /metrics and /policies over plain HTTP on --readiness-probe-port,
which answers from the start, while the policies load (/readiness 503 until they have).

Without --policies it serves the embedded example policies; without --cert-file it
generates a self-signed certificate and prints where its CA is. Every flag can also be
set as TOLLGATE_<FLAG> in the environment (--policy-timeout: TOLLGATE_POLICY_TIMEOUT)
or in the --config file; flags win over the environment, which wins over the file.

policies.yml is reloaded when it changes and on SIGHUP; SIGTERM drains in-flight
requests and exits.`,
		Example: `  tollgate serve --demo
  tollgate serve --policies policies.yml --cert-file tls.crt --key-file tls.key
  TOLLGATE_WORKERS=4 tollgate serve --policies policies.yml --insecure-http --port 8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if demoExit && !sendDemo {
				return errors.New("--demo-exit goes with --demo")
			}
			return runServe(cmd, &o, sendDemo, demoExit)
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&sendDemo, "demo", false, "once serving, send one sample request per example policy to the server and print the answers")
	cmd.Flags().BoolVar(&demoExit, "demo-exit", false, "with --demo: shut down (draining) after printing the answers")
	addCapabilityFlags(cmd)
	addConfigMapFlags(cmd)
	addVerificationFlags(cmd)
	return cmd
}

func runServe(cmd *cobra.Command, o *config.Options, sendDemo, demoExit bool) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	stderr := cmd.ErrOrStderr()

	// flags > environment > --config file > defaults
	cfgPath := o.ConfigPath
	if !cmd.Flags().Changed("config") {
		cfgPath = os.Getenv(config.EnvName("config"))
	}
	var cfgData []byte
	if cfgPath != "" {
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		cfgData = b
	}
	if err := config.ApplySources(cmd.Flags(), os.LookupEnv, cfgPath, cfgData); err != nil {
		return err
	}
	logFmt := o.LogFmt
	if logFmt != "json" {
		logFmt = "text" // another value is refused by serve's configuration, with every other problem
	}
	logger, err := newLogger(stderr, o.LogLevel, logFmt)
	if err != nil {
		return err
	}
	fs := cmd.Flags()
	so := serve.Options{Config: *o, Logger: logger, Stderr: stderr, VerificationPoll: verificationPoll, DemoExit: demoExit}
	so.PoliciesConfigMap, _ = fs.GetString("policies-configmap")
	so.Kubeconfig, _ = fs.GetString("kubeconfig")
	so.Context, _ = fs.GetString("context")
	so.MaxCachedObjects, _ = fs.GetInt("max-cached-objects")
	so.VerificationPath, _ = fs.GetString("verification-path")
	so.TrustConfigPath, _ = fs.GetString("sigstore-trust-config")
	if so.Telemetry, err = telemetry.FromEnv(os.LookupEnv); err != nil {
		return err
	}
	so.Version = version
	if sendDemo {
		so.Demo = func(addr, caFile string) error {
			return runDemo(cmd.OutOrStdout(), addr, o.InsecureHTTP, caFile, demoExit)
		}
	}
	return serve.Run(ctx, so)
}

// runDemo sends the sample requests to the server and prints the answers.
func runDemo(w io.Writer, addr string, plain bool, caFile string, exiting bool) error {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	base := "https://" + net.JoinHostPort(host, port)
	tr := &http.Transport{}
	if plain {
		base = "http://" + net.JoinHostPort(host, port)
	} else if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	} else {
		return errors.New("--demo needs the generated certificate (no --cert-file) or --insecure-http")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	u, _ := url.Parse(base)
	fmt.Fprintf(w, "\ntollgate serve --demo: one request per example policy to %s\n", u)
	for _, rq := range demo.Requests() {
		resp, err := client.Post(base+rq.Path, "application/json", strings.NewReader(rq.Body))
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Response json.RawMessage `json:"response"`
		}
		json.Unmarshal(body, &out)
		fmt.Fprintf(w, "\n%s (%s, expect %s): HTTP %s\n  %s\n", rq.Path, rq.Title, rq.Expect, strconv.Itoa(resp.StatusCode), out.Response)
		var patch struct {
			Patch []byte `json:"patch"`
		}
		if json.Unmarshal(out.Response, &patch) == nil && len(patch.Patch) > 0 {
			fmt.Fprintf(w, "  patch, decoded: %s\n", patch.Patch)
		}
	}
	cacert := ""
	if !plain {
		cacert = " --cacert " + caFile
	}
	intro := "Try it yourself:"
	if exiting {
		// this server is about to stop: point at the one `tollgate serve` starts
		intro = "Try it yourself: run `tollgate serve`, then:"
		base = "https://127.0.0.1:3000"
		if plain {
			base = "http://127.0.0.1:3000"
		}
	}
	fmt.Fprintf(w, "\n%s\n  curl%s -H 'Content-Type: application/json' --data '%s' %s/validate_raw/raw-validation\n\n",
		intro, cacert, `{"request":{"user":"mallory","action":"get","resource":"secrets/db"}}`, base)
	return nil
}

// verificationPoll is how often serve looks at the verification config and
// trust root files for changes (a Kubernetes ConfigMap volume changes them
// in place, through a symlink swap); tests shorten it.
var verificationPoll = 2 * time.Second

// addCapabilityFlags registers serve's host-capability flags, and --kubeconfig
// and --context unless serve has them already (they are shared with other
// features).
func addCapabilityFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	if fs.Lookup("kubeconfig") == nil {
		fs.String("kubeconfig", "", "kubeconfig of the cluster context-aware policies read (empty: $KUBECONFIG or ~/.kube/config, else in-cluster)")
	}
	if fs.Lookup("context") == nil {
		fs.String("context", "", "kubeconfig context")
	}
	fs.Int("max-cached-objects", capabilities.DefaultMaxCachedObjects, "most objects cached per Kubernetes resource that context-aware policies read; a resource with more is read by direct calls")
}

// addConfigMapFlags registers --policies-configmap on serve, and --kubeconfig and --context
// unless serve has them already (they may be shared with other features).
func addConfigMapFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.String("policies-configmap", "", "NAMESPACE/NAME: also watch policies.yml in this ConfigMap through the Kubernetes API (reloads within a second of a change; "+
		"the --policies file serves until the API answers, and when it cannot be reached)")
	if fs.Lookup("kubeconfig") == nil {
		fs.String("kubeconfig", "", "kubeconfig for --policies-configmap (empty: in-cluster, then $KUBECONFIG and ~/.kube/config)")
	}
	if fs.Lookup("context") == nil {
		fs.String("context", "", "kubeconfig context for --policies-configmap")
	}
}

// addVerificationFlags registers the policy-server's signature flags on serve.
func addVerificationFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.String("verification-path", "", "Kubewarden verification config: only registry:// modules whose Sigstore signatures satisfy it are loaded "+
		"(the others fail to load, with the reason in /policies)")
	fs.String("sigstore-trust-config", "", "with --verification-path: Sigstore ClientTrustConfig or trusted_root.json for keyless signatures "+
		"(default: the public-good root through Sigstore's TUF repository)")
}
