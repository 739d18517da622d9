package mapdiff_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

const modulePath = "../../policies/mutating-admission-policy/policy.wasm"

// loadModule reads the built module, failing with how to build it.
func loadModule(t testing.TB) []byte {
	t.Helper()
	path := modulePath
	if p := os.Getenv("TOLLGATE_MAP_MODULE"); p != "" {
		path = p // to compare builds: TOLLGATE_MAP_MODULE=/tmp/other.wasm go test -bench ...
	}
	b, err := os.ReadFile(path)
	if err != nil {
		abs, _ := filepath.Abs(modulePath)
		t.Fatalf("the mutating-admission-policy module is not built (%v): run `make policies` (or scripts/build-policies.sh policies/mutating-admission-policy) to build %s", err, abs)
	}
	return b
}

// request is one admission request of a case.
type request struct {
	name, namespace, operation, username string
	groups                               []string
	kind                                 protocol.GroupVersionKind
	resource                             protocol.GroupVersionResource
	object, oldObject                    json.RawMessage
}

var kinds = map[string][3]string{
	"Pod":        {"", "v1", "pods"},
	"ConfigMap":  {"", "v1", "configmaps"},
	"Namespace":  {"", "v1", "namespaces"},
	"Service":    {"", "v1", "services"},
	"Deployment": {"apps", "v1", "deployments"},
	"Job":        {"batch", "v1", "jobs"},
	"Widget":     {"example.com", "v1", "widgets"},
}

// newRequest builds a request from "OP object-yaml [old-object-yaml]".
func newRequest(t testing.TB, op, object, oldObject string) *request {
	t.Helper()
	toJSON := func(y string) json.RawMessage {
		if strings.TrimSpace(y) == "" {
			return nil
		}
		j, err := yaml.YAMLToJSON([]byte(y))
		if err != nil {
			t.Fatalf("bad YAML: %v\n%s", err, y)
		}
		return j
	}
	r := &request{operation: op, username: "alice", groups: []string{"system:authenticated"}, object: toJSON(object), oldObject: toJSON(oldObject)}
	src := r.object
	if src == nil {
		src = r.oldObject
	}
	var hdr struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(src, &hdr); err != nil {
		t.Fatal(err)
	}
	k, ok := kinds[hdr.Kind]
	if !ok {
		t.Fatalf("kind %q not in the table", hdr.Kind)
	}
	r.kind = protocol.GroupVersionKind{Group: k[0], Version: k[1], Kind: hdr.Kind}
	r.resource = protocol.GroupVersionResource{Group: k[0], Version: k[1], Resource: k[2]}
	r.name, r.namespace = hdr.Metadata.Name, hdr.Metadata.Namespace
	return r
}

func (r *request) admissionRequest(t testing.TB) []byte {
	b, err := json.Marshal(protocol.KubernetesAdmissionRequest{
		UID: "00000000-0000-0000-0000-000000000001", Kind: r.kind, Resource: r.resource,
		Name: r.name, Namespace: r.namespace, Operation: r.operation,
		UserInfo: protocol.UserInfo{Username: r.username, Groups: r.groups},
		Object:   r.object, OldObject: r.oldObject,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wasmOutcome runs a request through the module via the host.
func wasmOutcome(t *testing.T, p *policy.Policy, r *request) outcome {
	t.Helper()
	res, err := p.Validate(context.Background(), r.admissionRequest(t))
	if err != nil {
		t.Fatalf("host: %v", err)
	}
	resp := res.Response
	if !resp.Accepted {
		o := outcome{Rejected: true}
		if resp.Message != nil {
			o.Message = *resp.Message
		}
		if resp.Code != nil {
			o.Code = int32(*resp.Code)
		}
		return o
	}
	if len(resp.MutatedObject) == 0 {
		if res.Patch != nil {
			t.Fatalf("a patch without a mutated object: %s", res.Patch)
		}
		return outcome{}
	}
	return outcome{Object: normalize(t, resp.MutatedObject), Patch: string(res.Patch)}
}

func TestDifferential(t *testing.T) {
	module := loadModule(t)
	ctx := context.Background()
	host, err := policy.NewHost(ctx, policy.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close(ctx)

	total, mutated, rejected := 0, 0, 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reqs []*request
			var namespaces []string
			for _, rq := range c.requests {
				r := newRequest(t, rq.op, rq.object, rq.oldObject)
				if rq.user != "" {
					r.username, r.groups = rq.user, rq.groups
				}
				reqs = append(reqs, r)
				namespaces = append(namespaces, r.namespace)
			}
			var authz []authorizer.Authorizer
			if table, ok := caseAuthz[c.name]; ok {
				authz = append(authz, table)
			}
			ref := newReference(t, c.settings, namespaces, authz...)
			settings, err := yaml.YAMLToJSON([]byte(c.settings))
			if err != nil {
				t.Fatal(err)
			}
			// Five minutes: what is compared is the answer, and the cost-limit case runs the
			// CEL interpreter to its cost budget, which took more than 30 s at load 23 with
			// two CPU-bound processes beside the test (make test-under-load).
			p, err := host.Load(ctx, policy.Spec{ID: c.name, Module: module, Settings: settings, Timeout: 5 * time.Minute, PoolSize: 1})
			if err != nil {
				t.Fatalf("loading the module with the case's settings: %v", err)
			}
			defer p.Close(ctx)
			for i, r := range reqs {
				name := c.requests[i].name
				if name == "" {
					name = r.operation + " " + r.kind.Kind
				}
				t.Run(name, func(t *testing.T) {
					want := ref.evaluate(t, r)
					got := wasmOutcome(t, p, r)
					if got != want {
						t.Fatalf("the module and Kubernetes differ\nKubernetes:\n%s\nmodule:\n%s", want, got)
					}
					plain := want.Message + want.Object
					if want.Rejected {
						plain = "rejected " + plain
					}
					if c.requests[i].expect != "" && !strings.Contains(plain, c.requests[i].expect) {
						t.Fatalf("the outcome does not contain %q (the case does not test what it says):\n%s", c.requests[i].expect, want)
					}
					total++
					if want.Object != "" {
						mutated++
					}
					if want.Rejected {
						rejected++
					}
				})
			}
		})
	}
	t.Logf("%d requests compared: %d mutated, %d rejected, %d unchanged", total, mutated, rejected, total-mutated-rejected)
	if total < 60 && !t.Failed() && flag.Lookup("test.run").Value.String() == "" {
		t.Fatalf("only %d requests compared, the suite must compare at least 60", total)
	}
}

var _ = errors.New
