package examples_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// verdict is what a test expects from one evaluation.
type verdict struct {
	accepted bool
	message  string    // exact, when not empty
	code     uint16    // when not zero
	patch    []patchOp // nil: no mutation
}

type requestCase struct {
	request  string // testdata file
	settings string // testdata file, "" for none
	want     verdict
}

func newHost(t *testing.T) *policy.Host {
	t.Helper()
	h, err := policy.NewHost(context.Background(), policy.HostOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func loadExample(t *testing.T, h *policy.Host, example, settings string) *policy.Policy {
	t.Helper()
	p, err := h.Load(context.Background(), policy.Spec{
		ID:       example,
		Module:   testfixture.Module(t, "examples/"+example),
		Settings: settingsOf(t, example, settings),
	})
	if err != nil {
		t.Fatalf("load %s with %q: %v", example, settings, err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func settingsOf(t *testing.T, example, file string) json.RawMessage {
	if file == "" {
		return nil
	}
	return testfixture.File(t, "examples/"+example+"/testdata/"+file)
}

func check(t *testing.T, res *policy.Result, want verdict) {
	t.Helper()
	r := res.Response
	if r.Accepted != want.accepted {
		t.Fatalf("accepted = %v, want %v (message %v)", r.Accepted, want.accepted, deref(r.Message))
	}
	if want.message != "" && deref(r.Message) != want.message {
		t.Errorf("message = %q\nwant      %q", deref(r.Message), want.message)
	}
	if want.accepted && r.Message != nil {
		t.Errorf("accepted with a message %q", *r.Message)
	}
	if want.code != 0 && (r.Code == nil || *r.Code != want.code) {
		code := "none"
		if r.Code != nil {
			code = fmt.Sprint(*r.Code)
		}
		t.Errorf("code = %s, want %d", code, want.code)
	}
	if want.patch == nil {
		if res.Patch != nil {
			t.Errorf("patch = %s, want none", res.Patch)
		}
		return
	}
	var got []patchOp
	if err := json.Unmarshal(res.Patch, &got); err != nil {
		t.Fatalf("patch %q: %v", res.Patch, err)
	}
	sortOps(got)
	sortOps(want.patch)
	// Compare through JSON so that []string and []any values compare equal.
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want.patch)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("patch = %s\nwant    %s", gotJSON, wantJSON)
	}
}

func sortOps(ops []patchOp) {
	sort.Slice(ops, func(i, j int) bool { return ops[i].Path < ops[j].Path })
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func TestCapabilitiesDrop(t *testing.T) {
	h := newHost(t)
	p := loadExample(t, h, "capabilities-drop", "")
	if md := p.Metadata(); md == nil || !md.Mutating || md.IsRaw() {
		t.Fatalf("metadata = %+v, want a mutating Kubernetes policy", md)
	}
	addsCaps := verdict{accepted: true, patch: []patchOp{
		{Op: "add", Path: "/spec/containers/0/securityContext/capabilities/drop/1", Value: "BPF"},
		{Op: "add", Path: "/spec/initContainers/0/securityContext/capabilities/drop", Value: []string{"BPF"}},
	}}
	accepted := verdict{accepted: true}
	tests := []requestCase{
		{request: "pod-adds-capabilities.json", want: addsCaps},
		{request: "review-pod-adds-capabilities.json", want: addsCaps},
		{request: "pod-ephemeral-container.json", want: verdict{accepted: true, patch: []patchOp{
			{Op: "add", Path: "/spec/ephemeralContainers/0/securityContext/capabilities/drop", Value: []string{"BPF"}},
		}}},
		{request: "pod-no-capabilities.json", want: accepted},
		{request: "pod-already-drops-bpf.json", want: accepted},
		{request: "deployment.json", want: accepted},
		{request: "pod-delete.json", want: accepted},
	}
	for _, tt := range tests {
		t.Run(tt.request, func(t *testing.T) {
			// Twice: the second call reuses the instance the first one returned to the pool.
			for round := 0; round < 2; round++ {
				res, err := p.Validate(context.Background(), testfixture.File(t, "examples/capabilities-drop/testdata/"+tt.request))
				if err != nil {
					t.Fatal(err)
				}
				check(t, res, tt.want)
			}
		})
	}
}

func TestRequiredLabels(t *testing.T) {
	h := newHost(t)
	p := loadExample(t, h, "required-labels", "settings.json")
	if md := p.Metadata(); md == nil || md.Mutating || md.IsRaw() {
		t.Fatalf("metadata = %+v, want a validating Kubernetes policy", md)
	}
	missingOwner := verdict{code: 422, message: `Pod shop/nginx: mandatory label "owner" is missing`}
	tests := []requestCase{
		{request: "deployment-compliant.json", want: verdict{accepted: true}},
		{request: "pod-missing-label.json", want: missingOwner},
		{request: "review-pod-missing-label.json", want: missingOwner},
		{request: "pod-denied-label.json", want: verdict{code: 422, message: `Pod shop/nginx: label "debug" is denied`}},
		{request: "namespace-bad-value.json", want: verdict{code: 422,
			message: `Namespace shop: label "env" has value "production", which does not match prod|staging|dev-[a-z0-9]+`}},
		{request: "pod-no-labels.json", want: verdict{code: 422,
			message: `Pod shop/bare: mandatory label "app.kubernetes.io/name" is missing; mandatory label "owner" is missing`}},
	}
	for _, tt := range tests {
		t.Run(tt.request, func(t *testing.T) {
			res, err := p.Validate(context.Background(), testfixture.File(t, "examples/required-labels/testdata/"+tt.request))
			if err != nil {
				t.Fatal(err)
			}
			check(t, res, tt.want)
		})
	}

	t.Run("settings.yaml says what settings.json says", func(t *testing.T) {
		fromYAML, err := yaml.YAMLToJSON(testfixture.File(t, "examples/required-labels/testdata/settings.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(fromYAML, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(testfixture.File(t, "examples/required-labels/testdata/settings.json"), &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("settings.yaml = %s, differs from settings.json", fromYAML)
		}
	})

	t.Run("no settings accept everything", func(t *testing.T) {
		open := loadExample(t, h, "required-labels", "")
		res, err := open.Validate(context.Background(), testfixture.File(t, "examples/required-labels/testdata/pod-no-labels.json"))
		if err != nil {
			t.Fatal(err)
		}
		check(t, res, verdict{accepted: true})
	})
}

// TestRejectedSettings loads the examples with the settings their README says they reject: the
// load fails with ErrInvalidSettings and the policy's own message.
func TestRejectedSettings(t *testing.T) {
	h := newHost(t)
	tests := []struct {
		example, settings, message string
	}{
		{"required-labels", "settings-bad-regex.json", `constrained_labels["env"]: invalid regular expression "(prod|staging": error parsing regexp: missing closing )`},
		{"required-labels", "settings-contradiction.json", `label "debug" is in both mandatory_labels and denied_labels`},
		{"required-labels", "settings-unknown-field.json", `unknown settings field "required_labels"`},
		{"required-labels", "settings-wrong-type.json", `mandatory_labels must be a list of label names, got "owner"`},
		{"raw-validation", "settings-no-users.json", "allowed_users must list at least one user"},
		{"raw-validation", "settings-unknown-field.json", `unknown field "allowed_verbs"`},
		{"raw-validation", "", "allowed_users must list at least one user"},
	}
	for _, tt := range tests {
		t.Run(tt.example+"/"+tt.settings, func(t *testing.T) {
			_, err := h.Load(context.Background(), policy.Spec{
				ID:       tt.example,
				Module:   testfixture.Module(t, "examples/"+tt.example),
				Settings: settingsOf(t, tt.example, tt.settings),
			})
			if !errors.Is(err, policy.ErrInvalidSettings) || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("got %v, want ErrInvalidSettings containing %q", err, tt.message)
			}
		})
	}
}

func TestRawValidation(t *testing.T) {
	h := newHost(t)
	p := loadExample(t, h, "raw-validation", "settings.json")
	if md := p.Metadata(); md == nil || !md.IsRaw() {
		t.Fatalf("metadata = %+v, want policyType raw", md)
	}
	tests := []requestCase{
		{request: "request-accept.json", want: verdict{accepted: true}},
		{request: "bare-request-accept.json", want: verdict{accepted: true}},
		{request: "request-user-denied.json", want: verdict{code: 403,
			message: `user "mallory" is not allowed (allowed users: alice, bob)`}},
		{request: "request-action-denied.json", want: verdict{code: 403,
			message: `action "escalate" on "clusterroles/admin" is not allowed (allowed actions: get, list, delete)`}},
		{request: "request-no-user.json", want: verdict{code: 400, message: `the request has no "user"`}},
	}
	for _, tt := range tests {
		t.Run(tt.request, func(t *testing.T) {
			res, err := p.ValidateRaw(context.Background(), unwrap(t, testfixture.File(t, "examples/raw-validation/testdata/"+tt.request)))
			if err != nil {
				t.Fatal(err)
			}
			check(t, res, tt.want)
		})
	}
}

// unwrap returns X from the validate_raw body form {"request": X}, or the document itself.
func unwrap(t *testing.T, doc []byte) []byte {
	t.Helper()
	var env map[string]json.RawMessage
	if err := json.Unmarshal(doc, &env); err != nil {
		t.Fatal(err)
	}
	if r, ok := env["request"]; ok && len(env) == 1 {
		return r
	}
	return doc
}

// TestExampleTestdataIsCovered fails when an example gains a request file that no test above
// evaluates, so the tables stay complete.
func TestExampleTestdataIsCovered(t *testing.T) {
	covered := map[string]bool{}
	for _, f := range []string{
		"capabilities-drop/pod-adds-capabilities.json", "capabilities-drop/review-pod-adds-capabilities.json",
		"capabilities-drop/pod-ephemeral-container.json", "capabilities-drop/pod-no-capabilities.json",
		"capabilities-drop/pod-already-drops-bpf.json", "capabilities-drop/deployment.json", "capabilities-drop/pod-delete.json",
		"required-labels/deployment-compliant.json", "required-labels/pod-missing-label.json",
		"required-labels/review-pod-missing-label.json", "required-labels/pod-denied-label.json",
		"required-labels/namespace-bad-value.json", "required-labels/pod-no-labels.json",
		"required-labels/settings.json", "required-labels/settings.yaml", "required-labels/settings-bad-regex.json",
		"required-labels/settings-contradiction.json", "required-labels/settings-unknown-field.json",
		"required-labels/settings-wrong-type.json",
		"raw-validation/request-accept.json", "raw-validation/bare-request-accept.json",
		"raw-validation/request-user-denied.json", "raw-validation/request-action-denied.json",
		"raw-validation/request-no-user.json", "raw-validation/settings.json",
		"raw-validation/settings-no-users.json", "raw-validation/settings-unknown-field.json",
		"wasi-required-labels/pod-labelled.json", "wasi-required-labels/pod-missing-app.json",
		"wasi-required-labels/settings.json", "wasi-required-labels/settings-empty.json",
	} {
		covered[f] = true
	}
	for _, example := range []string{"capabilities-drop", "required-labels", "raw-validation", "wasi-required-labels"} {
		entries, err := os.ReadDir(testfixture.Path("examples/" + example + "/testdata"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !covered[example+"/"+e.Name()] {
				t.Errorf("examples/%s/testdata/%s is not exercised by this package's tests", example, e.Name())
			}
		}
	}
}
