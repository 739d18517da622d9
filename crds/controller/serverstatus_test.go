package controller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestServerStatusesEndpoints(t *testing.T) {
	port := func(name string, p int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: &name, Port: &p}
	}
	slice := func(name, svc string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			Endpoints:  eps, Ports: ports,
		}
	}
	ep := func(addr string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
		slice("a", "policy-server-x", []discoveryv1.EndpointPort{port("policy-server", 8443), port("readiness", 8081)},
			ep("10.0.0.1", ptr.To(true)), ep("10.0.0.2", nil), ep("10.0.0.3", ptr.To(false))),
		slice("b", "policy-server-x", []discoveryv1.EndpointPort{port("readiness", 8081)}, ep("fd00::1", nil), ep("10.0.0.1", nil)),
		// No readiness port: not asked.
		slice("c", "policy-server-x", []discoveryv1.EndpointPort{port("policy-server", 8443)}, ep("10.0.0.9", nil)),
		// Another server's.
		slice("d", "policy-server-y", []discoveryv1.EndpointPort{port("readiness", 8081)}, ep("10.0.0.8", nil)),
	).Build()
	s := newServerStatuses(c, testNS)
	got, err := s.readyEndpoints(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.1:8081", "10.0.0.2:8081", "[fd00::1]:8081"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	if st := s.Get(context.Background(), "none"); !errors.Is(st.Err, ErrNoReadyEndpoints) {
		t.Fatalf("no endpoints: %v", st.Err)
	}
}

func TestServerStatusesCache(t *testing.T) {
	e := newEnv(t)
	srv := e.addServer("default")
	srv.serve("sha256:a", ready("clusterwide-x"))
	s := newServerStatuses(e.c, testNS)
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }

	// 200 policies polled at once: one request.
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := s.Get(context.Background(), "default")
			if st.Err != nil || len(st.Endpoints) != 1 || st.Endpoints[0].Err != nil || st.Endpoints[0].Policies.ConfigDigest != "sha256:a" {
				t.Errorf("status %+v", st)
			}
		}()
	}
	wg.Wait()
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	// Later: asked again.
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	s.Get(context.Background(), "default")
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	// Forget: asked again at once.
	s.Forget("default")
	s.Get(context.Background(), "default")
	if n := srv.hits.Load(); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	// A server that answers garbage or an error status.
	srv.Close()
	s.Forget("default")
	if st := s.Get(context.Background(), "default"); st.Err != nil || st.Endpoints[0].Err == nil {
		t.Fatalf("closed server: %+v", st)
	}
}
