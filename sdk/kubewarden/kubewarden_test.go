//go:build !wasip1

package kubewarden

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/guest"
)

func TestResponses(t *testing.T) {
	tests := []struct {
		name string
		got  func() ([]byte, error)
		want string
	}{
		{"accept", func() ([]byte, error) { return AcceptRequest() }, `{"accepted":true}`},
		{"accept with warnings and annotations", func() ([]byte, error) {
			return AcceptRequest(WithWarnings("a", "b"), WithWarnings("c"), WithAuditAnnotations(map[string]string{"k": "v"}), WithAuditAnnotations(nil))
		}, `{"accepted":true,"audit_annotations":{"k":"v"},"warnings":["a","b","c"]}`},
		{"reject", func() ([]byte, error) { return RejectRequest("no", 403) }, `{"accepted":false,"message":"no","code":403}`},
		{"reject without message and code", func() ([]byte, error) { return RejectRequest(NoMessage, NoCode) }, `{"accepted":false}`},
		{"reject with warning", func() ([]byte, error) { return RejectRequest("no", NoCode, WithWarnings("w")) }, `{"accepted":false,"message":"no","warnings":["w"]}`},
		{"mutate struct", func() ([]byte, error) {
			return MutateRequest(struct {
				Kind string `json:"kind"`
			}{"Pod"})
		}, `{"accepted":true,"mutated_object":{"kind":"Pod"}}`},
		{"mutate map", func() ([]byte, error) { return MutateRequest(map[string]any{"a": 1}) }, `{"accepted":true,"mutated_object":{"a":1}}`},
		{"mutate raw", func() ([]byte, error) { return MutateRequest(json.RawMessage(" {\"a\": 1}\n")) }, `{"accepted":true,"mutated_object":{"a":1}}`},
		{"mutate bytes", func() ([]byte, error) { return MutateRequest([]byte(`{"b":2}`)) }, `{"accepted":true,"mutated_object":{"b":2}}`},
		{"accept settings", AcceptSettings, `{"valid":true}`},
		{"reject settings", func() ([]byte, error) { return RejectSettings("bad") }, `{"valid":false,"message":"bad"}`},
		{"reject settings without message", func() ([]byte, error) { return RejectSettings(NoMessage) }, `{"valid":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.got()
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}

func TestMutateRequestNotAnObject(t *testing.T) {
	for _, obj := range []any{"pod", 42, []int{1}, nil, json.RawMessage(`{"a":`), []byte(""), make(chan int)} {
		if b, err := MutateRequest(obj); err == nil {
			t.Errorf("MutateRequest(%#v) = %s, want an error", obj, b)
		} else if !strings.HasPrefix(err.Error(), "kubewarden: ") {
			t.Errorf("error %q lacks the package prefix", err)
		}
	}
}

type settings struct {
	Registries []string `json:"registries"`
	Always     bool     `json:"always"`
}

func TestParseValidationRequest(t *testing.T) {
	payload := `{"request":{"uid":"u1","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{"kind":"Pod"}},"settings":{"registries":["docker.io"]}}`
	s := settings{Always: true}
	req, err := ParseValidationRequest([]byte(payload), &s)
	if err != nil {
		t.Fatal(err)
	}
	if req.UID != "u1" || req.Kind.Kind != "Pod" || string(req.Object) != `{"kind":"Pod"}` {
		t.Fatalf("request %+v", req)
	}
	if len(s.Registries) != 1 || !s.Always {
		t.Fatalf("settings %+v (defaults must survive)", s)
	}

	for _, tt := range []struct{ name, payload, wantErr string }{
		{"not json", `{"request":`, "kubewarden: validation request: unexpected end of JSON input"},
		{"no request", `{"settings":{}}`, `no "request"`},
		{"null request", `{"request":null}`, `no "request"`},
		{"request not an object", `{"request":"x"}`, `field "request"`},
		{"settings of the wrong type", `{"request":{},"settings":{"registries":"docker.io"}}`, "kubewarden: settings: json: cannot unmarshal string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseValidationRequest([]byte(tt.payload), &settings{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	// Settings absent or null are fine and nil settings skip decoding.
	for _, p := range []string{`{"request":{}}`, `{"request":{},"settings":null}`, `{"request":{},"settings":{}}`} {
		s := settings{Always: true}
		if _, err := ParseValidationRequest([]byte(p), &s); err != nil || !s.Always {
			t.Errorf("%s: %v, %+v", p, err, s)
		}
		if _, err := ParseValidationRequest([]byte(p), nil); err != nil {
			t.Errorf("%s with nil settings: %v", p, err)
		}
	}
}

func captureLogs(t *testing.T) *[]string {
	var lines []string
	prev := guest.SetHostCallHandler(func(b, ns, op string, p []byte) ([]byte, error) {
		if b+"/"+ns+"/"+op != "kubewarden/tracing/log" {
			t.Errorf("unexpected host call %s/%s/%s", b, ns, op)
		}
		lines = append(lines, string(p))
		return nil, nil
	})
	t.Cleanup(func() { guest.SetHostCallHandler(prev) })
	return &lines
}

func TestLogger(t *testing.T) {
	lines := captureLogs(t)
	log := NewLogger(slog.Level(-8))
	log.Log(t.Context(), slog.Level(-8), "t")
	log.Debug("d", "n", 1)
	log.Info("i", slog.Group("g", "time", "kept", "msg", "kept"))
	log.Warn("w")
	log.Error("e", "err", "boom")
	log.With("policy", "p").Info("with")
	want := []string{
		`{"level":"trace","message":"t"}`,
		`{"level":"debug","message":"d","n":1}`,
		`{"level":"info","message":"i","g":{"time":"kept","msg":"kept"}}`,
		`{"level":"warning","message":"w"}`,
		`{"level":"error","message":"e","err":"boom"}`,
		`{"level":"info","message":"with","policy":"p"}`,
	}
	if strings.Join(*lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged\n%s\nwant\n%s", strings.Join(*lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoggerLevelAndReplaceAttr(t *testing.T) {
	lines := captureLogs(t)
	NewLogger(nil).Debug("hidden")
	h := NewLogHandler(&slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: func(g []string, a slog.Attr) slog.Attr {
		if a.Key == "secret" {
			a.Value = slog.StringValue("***")
		}
		return a
	}})
	slog.New(h).Info("hidden too")
	slog.New(h).Warn("shown", "secret", "pw")
	if len(*lines) != 1 || (*lines)[0] != `{"level":"warning","message":"shown","secret":"***"}` {
		t.Fatalf("logged %q", *lines)
	}
}

func TestLogWriterHostError(t *testing.T) {
	prev := guest.SetHostCallHandler(nil)
	defer guest.SetHostCallHandler(prev)
	if n, err := (LogWriter{}).Write([]byte(`{"level":"info","message":"x"}` + "\n")); err == nil || n != 0 {
		t.Fatalf("Write = %d, %v; want the host error", n, err)
	}
}

func TestProtocolVersion(t *testing.T) {
	out, err := guest.Invoke("protocol_version", nil)
	if err != nil || string(out) != `"v1"` {
		t.Fatalf("protocol_version = %s, %v", out, err)
	}
}

func BenchmarkRejectRequest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RejectRequest("image busybox is not from an allowed registry", 403, WithWarnings("w")); err != nil {
			b.Fatal(err)
		}
	}
}
