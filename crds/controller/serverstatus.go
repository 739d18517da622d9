package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/sync/singleflight"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// ErrNoReadyEndpoints: the policy server's Service has no ready endpoint to ask.
var ErrNoReadyEndpoints = errors.New("no ready endpoint")

// endpointStatus is what one endpoint of a policy server answered on GET /policies.
type endpointStatus struct {
	// Addr is the endpoint's host:port on the probe port.
	Addr string
	// Policies is the answer, nil when Err is set.
	Policies *status.Policies
	// Err says why the endpoint could not be asked (unreachable, timeout, bad answer).
	Err error
}

// serverStatus is what every ready endpoint of a policy server answered.
type serverStatus struct {
	// Endpoints, sorted by address; empty when Err is set.
	Endpoints []endpointStatus
	// Err is ErrNoReadyEndpoints (wrapped) or why the EndpointSlices could not be listed.
	Err error
}

const (
	// statusFetchTimeout bounds one GET /policies.
	statusFetchTimeout = time.Second
	// statusCacheTTL is how long one server's answers are reused: many policies on one server
	// polled at once share a single round of requests.
	statusCacheTTL = 250 * time.Millisecond
	// statusMaxBody bounds an answer of GET /policies.
	statusMaxBody = 32 << 20
)

// serverStatuses asks policy servers what they serve, through GET /policies on the probe port
// of every ready endpoint of their Service. Answers are cached per PolicyServer for
// statusCacheTTL, and concurrent callers for one server share one round of requests.
type serverStatuses struct {
	c         client.Reader
	namespace string
	http      *http.Client
	ttl       time.Duration
	now       func() time.Time

	group singleflight.Group
	mu    sync.Mutex
	cache map[string]cachedStatus
}

type cachedStatus struct {
	at time.Time
	st *serverStatus
}

func newServerStatuses(c client.Reader, namespace string) *serverStatuses {
	tr := &http.Transport{
		// The probe port is in the cluster (or on loopback): never through a proxy.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: statusFetchTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: statusFetchTimeout,
	}
	return &serverStatuses{
		c:         c,
		namespace: namespace,
		http:      &http.Client{Transport: tr, Timeout: statusFetchTimeout},
		ttl:       statusCacheTTL,
		now:       time.Now,
		cache:     map[string]cachedStatus{},
	}
}

// Get returns what the ready endpoints of policy server ps answer, at most ttl old.
func (s *serverStatuses) Get(ctx context.Context, ps string) *serverStatus {
	if st := s.cached(ps); st != nil {
		return st
	}
	v, _, _ := s.group.Do(ps, func() (any, error) {
		// A round may have ended between the look-up above and this one.
		if st := s.cached(ps); st != nil {
			return st, nil
		}
		// The caller's context may end before the others' do: the round has its own deadline.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*statusFetchTimeout)
		defer cancel()
		st := s.fetch(ctx, ps)
		s.mu.Lock()
		s.cache[ps] = cachedStatus{at: s.now(), st: st}
		s.mu.Unlock()
		return st, nil
	})
	return v.(*serverStatus)
}

// cached returns ps's answers if they are fresh enough, or nil.
func (s *serverStatuses) cached(ps string) *serverStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cache[ps]; ok && s.now().Sub(c.at) < s.ttl {
		return c.st
	}
	return nil
}

// Forget drops the cached answers of ps, so that the next Get asks again (its endpoints or
// configuration changed).
func (s *serverStatuses) Forget(ps string) {
	s.mu.Lock()
	delete(s.cache, ps)
	s.mu.Unlock()
}

// readyEndpoints returns the host:port of the probe port of every endpoint of ps's Service
// whose ready condition is not false, sorted and without duplicates.
func (s *serverStatuses) readyEndpoints(ctx context.Context, ps string) ([]string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := s.c.List(ctx, &slices, client.InNamespace(s.namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: v1.PolicyServerObjectName(ps)}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of %s: %w", v1.PolicyServerObjectName(ps), err)
	}
	seen := map[string]bool{}
	var addrs []string
	for i := range slices.Items {
		sl := &slices.Items[i]
		var port int32
		for _, p := range sl.Ports {
			if p.Name != nil && *p.Name == v1.ServicePortReadiness && p.Port != nil {
				port = *p.Port
				break
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if len(ep.Addresses) == 0 {
				continue
			}
			// Every address of an endpoint is the same pod: ask it once.
			a := net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port)))
			if !seen[a] {
				seen[a] = true
				addrs = append(addrs, a)
			}
		}
	}
	sort.Strings(addrs)
	return addrs, nil
}

func (s *serverStatuses) fetch(ctx context.Context, ps string) *serverStatus {
	addrs, err := s.readyEndpoints(ctx, ps)
	if err != nil {
		return &serverStatus{Err: err}
	}
	if len(addrs) == 0 {
		return &serverStatus{Err: fmt.Errorf("%w: the Service %s/%s has no ready endpoint with a port named %q",
			ErrNoReadyEndpoints, s.namespace, v1.PolicyServerObjectName(ps), v1.ServicePortReadiness)}
	}
	st := &serverStatus{Endpoints: make([]endpointStatus, len(addrs))}
	var wg sync.WaitGroup
	for i, a := range addrs {
		st.Endpoints[i].Addr = a
		wg.Add(1)
		go func(e *endpointStatus) {
			defer wg.Done()
			e.Policies, e.Err = s.get(ctx, e.Addr)
		}(&st.Endpoints[i])
	}
	wg.Wait()
	return st
}

// get asks one endpoint.
func (s *serverStatuses) get(ctx context.Context, addr string) (*status.Policies, error) {
	ctx, cancel := context.WithTimeout(ctx, statusFetchTimeout)
	defer cancel()
	url := "http://" + addr + "/policies"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, statusMaxBody))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	var p status.Policies
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return &p, nil
}
