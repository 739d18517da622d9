package examples_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestOPAUniqueIngressHost runs the built context-aware Rego example (executionMode opa) in the
// policy host, its data.kubernetes built by host/capabilities replaying the sessions test/e2e
// recorded against a real kube-apiserver (a list of Ingresses, then their plural name, as kwctl
// records them). The policy sees only the kinds it is granted: none without the grant, and a
// grant of another kind lists that kind, not Ingresses.
func TestOPAUniqueIngressHost(t *testing.T) {
	h := newHost(t)
	const example = "examples/opa-unique-ingress-host"
	request := testfixture.File(t, example+"/testdata/ingress-web.json")
	ingress := capabilities.Resource{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}
	secret := capabilities.Resource{APIVersion: "v1", Kind: "Secret"}
	type loaded struct {
		p      *policy.Policy
		replay *capabilities.Replayer
	}
	load := func(t *testing.T, session string, granted ...capabilities.Resource) loaded {
		t.Helper()
		r, err := capabilities.LoadSession(testfixture.Path(example + "/testdata/" + session))
		if err != nil {
			t.Fatal(err)
		}
		caps := capabilities.New(capabilities.Options{Replay: r})
		p, err := h.Load(context.Background(), policy.Spec{
			ID:      "opa-unique-ingress-host",
			Module:  testfixture.Module(t, example),
			Cluster: caps.Cluster("opa-unique-ingress-host", granted),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		return loaded{p, r}
	}
	tests := []struct {
		name, session string
		granted       []capabilities.Resource
		want          verdict
		wantLeft      int // exchanges of the session not replayed
	}{
		{"conflict", "session-conflict.yml", []capabilities.Resource{ingress},
			verdict{message: `Ingress opa-shop/web: host "shop.example.org" is already used by Ingress opa-team-b/storefront`, code: 409}, 0},
		{"free", "session-free.yml", []capabilities.Resource{ingress}, verdict{accepted: true}, 0},
		// Not granted: no data.kubernetes (as with kwctl without --allow-context-aware), so
		// the conflicting Ingress is not seen; the session is not consulted.
		{"not granted", "session-conflict.yml", nil, verdict{accepted: true}, 2},
		// Granted another kind: that kind is what the host lists (the recorded Ingress list
		// does not answer it), and the evaluation is rejected with the reason.
		{"another kind granted", "session-conflict.yml", []capabilities.Resource{secret},
			verdict{code: 500, message: `cannot build the Kubernetes context of the policy: listing v1/Secret: Replay error: unexpected request. ` +
				`Was expecting KubernetesListResourceAll {"api_version":"networking.k8s.io/v1","kind":"Ingress"}, got KubernetesListResourceAll {"api_version":"v1","kind":"Secret"} instead`}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := load(t, tt.session, tt.granted...)
			res, err := l.p.Validate(context.Background(), request)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want.code == 500 {
				// The replay error also names the session file and entry.
				if msg := deref(res.Response.Message); !strings.HasPrefix(msg, tt.want.message) {
					t.Fatalf("message %q, want it to start with %q", msg, tt.want.message)
				}
				tt.want.message = ""
			}
			check(t, res, tt.want)
			if left := l.replay.Remaining(); left != tt.wantLeft {
				t.Errorf("%d exchanges left in the session, want %d", left, tt.wantLeft)
			}
		})
	}

	// The capability refuses a list of a kind outside the grant, with Kubewarden's text.
	caps := capabilities.New(capabilities.Options{})
	_, err := caps.Cluster("opa-unique-ingress-host", []capabilities.Resource{ingress}).ListAll(context.Background(), secret)
	if err == nil || err.Error() != "Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported." {
		t.Fatalf("a list of an undeclared kind: %v", err)
	}
}
