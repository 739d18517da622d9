package wasm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// An inline handler runs on the calling goroutine, and its panic becomes an
// ErrHostCall error as on the watchdog path.
func TestInlineHostCallHandler(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "caller")
	h := func(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
		if namespace == "panic" {
			panic("boom")
		}
		return []byte(binding + "/" + namespace + "/" + operation + ":" + string(payload)), nil
	}
	for _, with := range []func(context.Context, HostCallHandler) context.Context{WithHostCallHandler, WithInlineHostCallHandler} {
		c := with(ctx, h)
		out, err := dispatchHostCall(c, "kubewarden", "net", "v1/dns_lookup_host", []byte(`"x"`))
		if err != nil || string(out) != `kubewarden/net/v1/dns_lookup_host:"x"` {
			t.Fatalf("got %s, %v", out, err)
		}
		_, err = dispatchHostCall(c, "kubewarden", "panic", "x", nil)
		if !errors.Is(err, ErrHostCall) || !strings.Contains(err.Error(), "kubewarden/panic/x panicked: boom") {
			t.Fatalf("panic: %v", err)
		}
	}
	if _, err := dispatchHostCall(ctx, "kubewarden", "net", "x", nil); !errors.Is(err, ErrHostCall) {
		t.Fatalf("no handler: %v", err)
	}
}
