package audit

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// ServerOptions configure how Run reaches the policy servers.
type ServerOptions struct {
	// URL, if set, replaces https://<service>.<namespace>.svc:<port> for every policy server
	// (Kubewarden's --policy-server-url, for runs outside the cluster); certificates are still
	// verified for the Service's name.
	URL string
	// ServiceIP dials the Service's ClusterIP instead of resolving its DNS name (a run that
	// reaches the Service network but not the cluster's DNS).
	ServiceIP bool
	// ExtraCAs are PEM bundles trusted besides the caBundle of the policies' webhook
	// configurations (which the operator keeps: its CA, and the previous one while it is valid).
	ExtraCAs [][]byte
	// ClientCert is presented to servers that ask for one (mTLS).
	ClientCert *tls.Certificate
	// Timeout is one request's deadline (default 10 s, Kubewarden's).
	Timeout time.Duration
	// MaxConns bounds the connections per policy server (default 32).
	MaxConns int
}

// downAfter is how many transport errors in a row mark a policy server down for the rest of the
// run: its remaining evaluations are errors at once, with the last error, instead of each
// waiting for its own timeout.
const downAfter = 5

// serverEvaluator sends reviews to /audit/<policy> of the policy's PolicyServer.
type serverEvaluator struct {
	c         client.Reader
	namespace string
	o         ServerOptions
	pool      *x509.CertPool

	mu      sync.Mutex
	servers map[string]*serverState
}

type serverState struct {
	base string // https://host:port
	http *http.Client
	err  error // resolving the Service failed: every evaluation errors with it

	mu       sync.Mutex
	failures int
	down     error
}

// newServerEvaluator trusts the extra CAs and the caBundle of every audited policy's webhook
// configuration (loadWebhooks); a policy whose configuration is missing trusts the others'
// (there is one CA).
func newServerEvaluator(c client.Reader, namespace string, o ServerOptions, policies []*Policy) (*serverEvaluator, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 32
	}
	pool := x509.NewCertPool()
	n := 0
	for i, pem := range o.ExtraCAs {
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("extra CA #%d: no PEM certificate in it", i+1)
		}
		n++
	}
	for _, p := range policies {
		if p.webhook != nil && len(p.webhook.caBundle) > 0 && pool.AppendCertsFromPEM(p.webhook.caBundle) {
			n++
		}
	}
	e := &serverEvaluator{c: c, namespace: namespace, o: o, pool: pool, servers: map[string]*serverState{}}
	if n == 0 && len(policies) > 0 {
		// nothing to verify the servers against: every evaluation errors, saying why
		e.pool = nil
	}
	return e, nil
}

func (e *serverEvaluator) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.servers {
		if s.http != nil {
			s.http.CloseIdleConnections()
		}
	}
}

// newHTTPClient is the client of one policy server: its certificate must name the Service
// (serverName), whatever address is dialled.
func (e *serverEvaluator) newHTTPClient(serverName string) *http.Client {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: e.pool, ServerName: serverName}
	if e.o.ClientCert != nil {
		cfg.Certificates = []tls.Certificate{*e.o.ClientCert}
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConns:        e.o.MaxConns,
		MaxIdleConnsPerHost: e.o.MaxConns,
		MaxConnsPerHost:     e.o.MaxConns,
		IdleConnTimeout:     30 * time.Second,
		// HTTP/1.1 on several connections, so that the Service spreads them over the replicas
		// (one HTTP/2 connection would pin every request to one pod)
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return &http.Client{Transport: tr, Timeout: e.o.Timeout}
}

// server resolves a PolicyServer's address once per run.
func (e *serverEvaluator) server(ctx context.Context, name string) *serverState {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.servers[name]; ok {
		return s
	}
	s := &serverState{}
	e.servers[name] = s
	svcName := v1.PolicyServerObjectName(name)
	var svc corev1.Service
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: svcName}, &svc); err != nil {
		s.err = fmt.Errorf("policy server %s: Service %s/%s: %w", name, e.namespace, svcName, err)
		return s
	}
	s.http = e.newHTTPClient(v1.ServiceHost(name, e.namespace))
	if e.o.URL != "" {
		s.base = strings.TrimRight(e.o.URL, "/")
		return s
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		if p.Name == v1.ServicePortWebhook {
			port = p.Port
		}
	}
	if port == 0 {
		s.err = fmt.Errorf("policy server %s: Service %s/%s has no port named %q", name, e.namespace, svcName, v1.ServicePortWebhook)
		return s
	}
	host := v1.ServiceHost(name, e.namespace)
	if e.o.ServiceIP {
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			s.err = fmt.Errorf("policy server %s: Service %s/%s has no ClusterIP", name, e.namespace, svcName)
			return s
		}
		host = svc.Spec.ClusterIP
	}
	s.base = "https://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
	return s
}

// Evaluate posts review to /audit/<policy>: a transport error, an HTTP status other than 200
// or a response with status.code 500 is an Error (Kubewarden's rules); else allowed is Pass
// and denied is Fail.
func (e *serverEvaluator) Evaluate(ctx context.Context, p *Policy, review []byte) Verdict {
	s := e.server(ctx, p.Server)
	if s.err != nil {
		return Verdict{Error, s.err.Error()}
	}
	if e.pool == nil {
		return Verdict{Error, "no CA to verify policy server " + p.Server + " with: the policy has no webhook configuration with a caBundle and no extra CA was given"}
	}
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down != nil {
		return Verdict{Error, fmt.Sprintf("policy server %s is unreachable (%d requests in a row failed): %v", p.Server, downAfter, down)}
	}
	v, transportErr := e.post(ctx, p, s, review)
	// A connection that could not be made sent nothing: try again, a few times within about two
	// seconds. A Service's rules or endpoints lag behind a pod that just became ready or a
	// rollout (kube-proxy has not programmed them yet: "network is unreachable", "connection
	// refused"), and an hourly audit should not report errors for that.
	for i, wait := 0, dialRetryWait; transportErr != nil && isDialError(transportErr) && i < dialRetries && ctx.Err() == nil; i, wait = i+1, 2*wait {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			v, transportErr = e.post(ctx, p, s, review)
		}
	}
	s.mu.Lock()
	if transportErr != nil && ctx.Err() == nil {
		s.failures++
		if s.failures >= downAfter {
			s.down = transportErr
		}
	} else if transportErr == nil {
		s.failures = 0
	}
	s.mu.Unlock()
	return v
}

func (e *serverEvaluator) post(ctx context.Context, p *Policy, s *serverState, review []byte) (Verdict, error) {
	url := s.base + "/audit/" + p.ID
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(review))
	if err != nil {
		return Verdict{Error, err.Error()}, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if trace.SpanFromContext(ctx).IsRecording() { // a traced run: the server's spans join its trace
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return Verdict{Error, fmt.Sprintf("policy server %s: %v", p.Server, err)}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return Verdict{Error, fmt.Sprintf("policy server %s: reading the answer: %v", p.Server, err)}, err
	}
	var rv struct {
		Response *struct {
			Allowed bool `json:"allowed"`
			Status  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	decodeErr := json.Unmarshal(body, &rv)
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if decodeErr == nil && rv.Response != nil && rv.Response.Status != nil && rv.Response.Status.Message != "" {
			msg = rv.Response.Status.Message
		}
		return Verdict{Error, fmt.Sprintf("policy server %s: %s: HTTP %d: %s", p.Server, url, resp.StatusCode, truncate(msg, 512))}, nil
	}
	if decodeErr != nil || rv.Response == nil {
		if decodeErr == nil {
			decodeErr = errors.New("no response")
		}
		return Verdict{Error, fmt.Sprintf("policy server %s: %s: not an AdmissionReview: %v", p.Server, url, decodeErr)}, nil
	}
	r := rv.Response
	msg := ""
	if r.Status != nil {
		msg = r.Status.Message
		if r.Status.Code == http.StatusInternalServerError {
			return Verdict{Error, msg}, nil
		}
	}
	if r.Allowed {
		return Verdict{Pass, ""}, nil
	}
	return Verdict{Fail, msg}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// dialRetries and dialRetryWait bound the retries of a connection that could not be made:
// waits of 250, 500 and 1000 ms.
const (
	dialRetries   = 3
	dialRetryWait = 250 * time.Millisecond
)

// isDialError reports whether err failed to open a connection (nothing was sent).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
