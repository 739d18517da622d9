package sdkguest_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/host/policy"
)

const exampleDir = "../../examples/go-image-registries"

var (
	buildOnce sync.Once
	wasmPath  string
	buildErr  error
)

// buildExample builds the example with the go-wasip1 build kind of
// scripts/build-policies.sh into a temporary directory shared by the tests.
func buildExample(t *testing.T) []byte {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sdkguest-")
		if err != nil {
			buildErr = err
			return
		}
		wasmPath = filepath.Join(dir, "policy.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s", "-o", wasmPath, ".")
		cmd.Dir = exampleDir
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("building " + exampleDir + ": " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	b, err := os.ReadFile(wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMain(m *testing.M) {
	code := m.Run()
	if wasmPath != "" {
		_ = os.RemoveAll(filepath.Dir(wasmPath))
	}
	os.Exit(code)
}

type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func load(t *testing.T, settingsFile string, poolSize int, logs *logRecorder) *policy.Policy {
	t.Helper()
	ctx := context.Background()
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: filepath.Join(os.TempDir(), "tollgate-test-wazero-cache"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(ctx) })
	settings, err := os.ReadFile(filepath.Join(exampleDir, "testdata", settingsFile))
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Load(ctx, policy.Spec{ID: "go-image-registries", Module: buildExample(t), Settings: settings, PoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ctx) })
	return p
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(exampleDir, "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoImageRegistriesThroughHost(t *testing.T) {
	logs := &logRecorder{}
	p := load(t, "settings.json", 1, logs)
	pull := load(t, "settings-always-pull.json", 1, nil)
	tests := []struct {
		name         string
		policy       *policy.Policy
		fixture      string
		wantAccepted bool
		wantCode     uint16
		wantInMsg    string
		wantWarnings int
		wantPatch    string
	}{
		{name: "allowed", policy: p, fixture: "pod-allowed.json", wantAccepted: true},
		{name: "bare AdmissionRequest", policy: p, fixture: "pod-allowed-request.json", wantAccepted: true},
		{name: "denied", policy: p, fixture: "pod-denied.json", wantCode: 403, wantInMsg: `container "miner": evil.example.com/miner:1`},
		{name: "denied deployment", policy: p, fixture: "deployment-denied.json", wantCode: 403, wantInMsg: "quay.io/acme/api:3"},
		{name: "latest warns", policy: p, fixture: "pod-latest.json", wantAccepted: true, wantWarnings: 2},
		{name: "delete", policy: p, fixture: "pod-delete.json", wantAccepted: true},
		{name: "mutation", policy: pull, fixture: "pod-allowed.json", wantAccepted: true,
			wantPatch: `[{"op":"replace","path":"/spec/containers/0/imagePullPolicy","value":"Always"},` +
				`{"op":"add","path":"/spec/containers/1/imagePullPolicy","value":"Always"},` +
				`{"op":"add","path":"/spec/initContainers/0/imagePullPolicy","value":"Always"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.policy.Validate(context.Background(), readFixture(t, tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			r := res.Response
			if r.Accepted != tt.wantAccepted {
				t.Fatalf("accepted = %v, want %v (message %v)", r.Accepted, tt.wantAccepted, r.Message)
			}
			if tt.wantCode != 0 && (r.Code == nil || *r.Code != tt.wantCode) {
				t.Errorf("code = %v, want %d", r.Code, tt.wantCode)
			}
			if tt.wantInMsg != "" && (r.Message == nil || !strings.Contains(*r.Message, tt.wantInMsg)) {
				t.Errorf("message %v does not contain %q", r.Message, tt.wantInMsg)
			}
			if len(r.Warnings) != tt.wantWarnings {
				t.Errorf("warnings = %q, want %d", r.Warnings, tt.wantWarnings)
			}
			if string(res.Patch) != tt.wantPatch {
				t.Errorf("patch = %s\nwant    %s", res.Patch, tt.wantPatch)
			}
		})
	}
	// The rejection was logged through kubewarden/tracing/log to the host's logger.
	logs.mu.Lock()
	defer logs.mu.Unlock()
	found := false
	for _, l := range logs.lines {
		if strings.Contains(l, `"msg":"rejected images"`) && strings.Contains(l, `"images":2`) {
			found = true
		}
	}
	if !found {
		t.Errorf("the policy's log record did not reach the host's logger; logged:\n%s", strings.Join(logs.lines, ""))
	}
}

func TestGoImageRegistriesInvalidSettings(t *testing.T) {
	ctx := context.Background()
	h, err := policy.NewHost(ctx, policy.HostOptions{DisableCache: false, CacheDir: filepath.Join(os.TempDir(), "tollgate-test-wazero-cache")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	for _, tt := range []struct{ settings, want string }{
		{`{"allowedRegistries":["https://ghcr.io"]}`, `setting allowedRegistries[0] "https://ghcr.io": must not have a scheme`},
		{`{}`, "setting allowedRegistries must list at least one registry"},
		{`{"allowedRegistry":["docker.io"]}`, `unknown setting "allowedRegistry"`},
	} {
		_, err := h.Load(ctx, policy.Spec{ID: "p", Module: buildExample(t), Settings: json.RawMessage(tt.settings)})
		if !errors.Is(err, policy.ErrInvalidSettings) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("settings %s: error %v, want ErrInvalidSettings with %q", tt.settings, err, tt.want)
		}
	}
}

// Concurrent evaluations on a small pool must each get their own answer: the
// guest reuses its buffers and the host reads answers out of linear memory,
// so an answer read after its instance went back to the pool would be
// overwritten by the next call.
func TestGoImageRegistriesConcurrent(t *testing.T) {
	p := load(t, "settings.json", 2, nil)
	allowed, denied := readFixture(t, "pod-allowed.json"), readFixture(t, "pod-denied.json")
	const workers, calls = 6, 60
	var wg sync.WaitGroup
	errs := make(chan error, workers*calls)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				req, want := allowed, true
				if (w+i)%2 == 1 {
					req, want = denied, false
				}
				res, err := p.Validate(context.Background(), req)
				if err != nil {
					errs <- err
					return
				}
				r := res.Response
				if r.Accepted != want || (!want && (r.Message == nil || !strings.Contains(*r.Message, "evil.example.com/miner:1"))) ||
					(want && r.Message != nil) {
					b, _ := json.Marshal(r)
					errs <- errors.New("wrong answer: " + string(b))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
