package opa_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/opa"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

func readModule(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func compile(t testing.TB, path string, cfg opa.Config) *opa.Module {
	t.Helper()
	m, err := opa.Compile(context.Background(), nil, readModule(t, path), cfg)
	if err != nil {
		t.Fatalf("Compile %s: %v", path, err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func TestGatekeeperExample(t *testing.T) {
	m := compile(t, "examples/gatekeeper-allowed-registries/policy.wasm", opa.Config{})
	if maj, min := m.ABIVersion(); maj != 1 || min < 2 || !m.FastPath() {
		t.Fatalf("ABI %d.%d fast %v", maj, min, m.FastPath())
	}
	for _, tc := range []struct {
		name, pod, want string
	}{
		{"allowed", "pod-allowed.json", `[{"result":[]}]`},
		{"disallowed", "pod-disallowed.json", `latest`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := readModule(t, "examples/gatekeeper-allowed-registries/testdata/"+tc.pod)
			input := `{"parameters":{"registries":["registry.example.com/"]},"review":` + string(pod) + `}`
			for range 3 { // the same instance, heap reset between evaluations
				out, err := m.Eval(context.Background(), time.Second, []byte(input), nil)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(out), tc.want) {
					t.Fatalf("got %s, want %s", out, tc.want)
				}
				if !json.Valid(out) {
					t.Fatalf("not JSON: %s", out)
				}
			}
		})
	}
	if m.Live() != 1 {
		t.Fatalf("%d instances, want 1", m.Live())
	}
}

func TestOPAExampleBuiltin(t *testing.T) {
	m := compile(t, "examples/opa-required-labels/policy.wasm", opa.Config{Data: []byte(`{"labels":["team","owner"]}`)})
	if got := m.HostBuiltins(); len(got) != 1 || got[0] != "sprintf" {
		t.Fatalf("host builtins %v, want [sprintf]", got)
	}
	pod := readModule(t, "examples/opa-required-labels/testdata/pod-missing-owner.json")
	out, err := m.Eval(context.Background(), time.Second, []byte(`{"request":`+string(pod)+`}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `Pod shop/bad: mandatory label \"owner\" is missing`) {
		t.Fatalf("got %s", out)
	}
	_ = errors.Is
	_ = wasm.ErrTrap
}
