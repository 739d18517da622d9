//go:build !wasip1

package guest

import (
	"errors"
	"strings"
	"testing"
)

func TestInvoke(t *testing.T) {
	RegisterFunctions(map[string]Function{
		"echo":   func(p []byte) ([]byte, error) { return p, nil },
		"fail":   func([]byte) ([]byte, error) { return nil, errors.New("settings are wrong") },
		"panic":  func([]byte) ([]byte, error) { panic("boom") },
		"index":  func(p []byte) ([]byte, error) { return []byte{p[10]}, nil },
		"nilmap": func([]byte) ([]byte, error) { var m map[string]int; m["x"] = 1; return nil, nil },
	})
	t.Cleanup(func() {
		RegisterFunctions(map[string]Function{"echo": nil, "fail": nil, "panic": nil, "index": nil, "nilmap": nil})
	})

	tests := []struct {
		name      string
		op        string
		payload   string
		want      string
		wantErr   error
		wantInErr []string
	}{
		{name: "echo", op: "echo", payload: `{"a":1}`, want: `{"a":1}`},
		{name: "empty payload", op: "echo", payload: "", want: ""},
		{name: "function error", op: "fail", wantInErr: []string{"settings are wrong"}},
		{name: "unknown operation", op: "nope", wantErr: ErrUnknownOperation,
			wantInErr: []string{`unknown operation "nope"`, "echo, fail, index, nilmap, panic"}},
		{name: "panic value", op: "panic", wantInErr: []string{`operation "panic" panicked: boom`, "guest.TestInvoke"}},
		{name: "runtime panic", op: "index", wantInErr: []string{`operation "index" panicked`, "index out of range", "guest_test.go"}},
		{name: "nil map panic", op: "nilmap", wantInErr: []string{"assignment to entry in nil map"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Invoke(tt.op, []byte(tt.payload))
			if tt.wantErr == nil && tt.wantInErr == nil {
				if err != nil {
					t.Fatalf("Invoke: %v", err)
				}
				if string(got) != tt.want {
					t.Fatalf("Invoke = %q, want %q", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Invoke = %q, want an error", got)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v is not %v", err, tt.wantErr)
			}
			for _, s := range tt.wantInErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestPanicErrorValue(t *testing.T) {
	RegisterFunctions(map[string]Function{"p": func([]byte) ([]byte, error) { panic(42) }})
	t.Cleanup(func() { RegisterFunctions(map[string]Function{"p": nil}) })
	_, err := Invoke("p", nil)
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *PanicError", err)
	}
	if pe.Value != 42 || pe.Operation != "p" || pe.Location == "" {
		t.Fatalf("PanicError = %+v", pe)
	}
}

func TestHostCall(t *testing.T) {
	defer SetHostCallHandler(nil)
	if _, err := HostCall("kubewarden", "tracing", "log", nil); err == nil || !strings.Contains(err.Error(), "no host call handler set for kubewarden/tracing/log") {
		t.Fatalf("HostCall without a handler: %v", err)
	}
	SetHostCallHandler(func(b, ns, op string, p []byte) ([]byte, error) {
		switch {
		case ns == "net" && op == "v1/dns_lookup_host":
			return []byte(`["127.0.0.1"]`), nil
		case ns == "tracing":
			return nil, nil
		}
		return nil, errors.New("not allowed: " + b + "/" + ns + "/" + op)
	})
	got, err := HostCall("kubewarden", "net", "v1/dns_lookup_host", []byte(`"localhost"`))
	if err != nil || string(got) != `["127.0.0.1"]` {
		t.Fatalf("HostCall = %q, %v", got, err)
	}
	got, err = HostCall("kubewarden", "tracing", "log", []byte(`{}`))
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("HostCall with an empty answer = %#v, %v; want an empty, non-nil slice", got, err)
	}
	_, err = HostCall("kubewarden", "oci", "v1/verify", nil)
	var he *HostError
	if !errors.As(err, &he) || he.Message != "not allowed: kubewarden/oci/v1/verify" {
		t.Fatalf("HostCall error = %v", err)
	}
}

func TestConsoleLog(t *testing.T) {
	var got []string
	defer SetConsoleLogger(SetConsoleLogger(func(m string) { got = append(got, m) }))
	ConsoleLog("one")
	ConsoleLog("two")
	if strings.Join(got, ",") != "one,two" {
		t.Fatalf("console got %q", got)
	}
}

func BenchmarkInvoke(b *testing.B) {
	RegisterFunctions(map[string]Function{"echo": func(p []byte) ([]byte, error) { return p, nil }})
	payload := []byte(`{"request":{},"settings":{}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Invoke("echo", payload); err != nil {
			b.Fatal(err)
		}
	}
}
