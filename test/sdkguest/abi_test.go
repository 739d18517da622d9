package sdkguest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

func buildABIGuest(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "abi-guest.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s", "-o", out, ".")
	cmd.Dir = "testdata/abi-guest"
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/abi-guest: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(action, data string) []byte {
	obj, _ := json.Marshal(map[string]string{"action": action, "data": data})
	return fmt.Appendf(nil, `{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":%s}`, obj)
}

func TestGuestABIThroughHost(t *testing.T) {
	ctx := context.Background()
	h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: filepath.Join(os.TempDir(), "tollgate-test-wazero-cache")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	p, err := h.Load(ctx, policy.Spec{ID: "abi", Module: buildABIGuest(t), PoolSize: 1, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)

	// A panic is a guest error naming the panic and where it happened, not a
	// trap: the one instance stays in the pool and answers the next request.
	_, err = p.Validate(ctx, request("panic", ""))
	if !errors.Is(err, wasm.ErrGuest) || errors.Is(err, wasm.ErrTrap) ||
		!strings.Contains(err.Error(), `operation "validate" panicked: assignment to entry in nil map`) ||
		!strings.Contains(err.Error(), "main.validate") {
		t.Fatalf("panic: error %v, want a guest error with the panic value and location", err)
	}
	if live, _ := p.Instances(); live != 1 {
		t.Errorf("instances after a guest panic = %d, want the same 1 instance kept", live)
	}
	res, err := p.Validate(ctx, request("ok", ""))
	if err != nil || !res.Response.Accepted {
		t.Fatalf("after the panic: %+v, %v", res, err)
	}

	_, err = p.Validate(ctx, request("fail", ""))
	if !errors.Is(err, wasm.ErrGuest) || !strings.Contains(err.Error(), "the policy failed on purpose") {
		t.Fatalf("fail: %v", err)
	}

	// A host call the policy may not make reaches the guest as a *guest.HostError
	// carrying the host's message.
	res, err = p.Validate(ctx, request("hostcall", ""))
	if err != nil || res.Response.Message == nil || !strings.Contains(*res.Response.Message, "host said: host capability kubewarden/net/v1/dns_lookup_host is not available") {
		t.Fatalf("hostcall: %+v, %v", res, err)
	}

	// A payload larger than the buffer the guest retains (1 MiB), then small
	// ones again: every byte arrives each time. (Large payloads are slow here:
	// about 1 s per MiB with the host's close-on-context-done, hence the
	// generous timeout above.)
	for _, n := range []int{10, 1<<20 + 4096, 100, 0} {
		start := time.Now()
		res, err := p.Validate(ctx, request("echo-size", strings.Repeat("x", n)))
		t.Logf("data %d: %v (guest %v)", n, time.Since(start), res.GuestDuration)
		if err != nil {
			t.Fatalf("data %d: %v", n, err)
		}
		want := fmt.Sprintf(" data %d", n)
		if m := res.Response.Message; m == nil || !strings.HasSuffix(*m, want) {
			t.Fatalf("data %d: message %v, want suffix %q", n, m, want)
		}
	}
}
