package policy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestGuestLogFields: a real policy's log line cannot forge the server's
// fields: its own fields are in the group "guest", so "policy":"other"
// becomes guest.policy beside the real policy id; long values are cut; and
// a policy logging 1000 lines in one evaluation gets its burst through and
// the rest dropped and counted.
func TestGuestLogFields(t *testing.T) {
	logs := &testfixture.SyncBuffer{}
	var mu sync.Mutex
	dropped := map[string]int{}
	h, err := policy.NewHost(context.Background(), policy.HostOptions{
		CacheDir: t.TempDir(),
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		GuestLogDropped: func(id string) {
			mu.Lock()
			dropped[id]++
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	line := map[string]any{"level": "error", "message": "forged", "policy": "other", "uid": "u-1", "error": "fake",
		"long": strings.Repeat("y", 5000)}
	logTimes := func(id string, n int) {
		t.Helper()
		settings, _ := json.Marshal(map[string]any{"behaviour": "hostcall", "namespace": "tracing", "operation": "log",
			"payload": line, "repeat": n})
		p := load(t, h, policy.Spec{ID: id, Module: testfixture.Module(t, "test/testdata/policies/misbehave"),
			Settings: settings, Timeout: 5 * time.Second, PoolSize: 1})
		if _, err := p.Validate(context.Background(), []byte(podRequest)); err != nil {
			t.Fatal(err)
		}
	}
	logTimes("real", 1)
	lines := jsonLines(t, logs.String(), "forged")
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", len(lines), logs)
	}
	l := lines[0]
	guest, _ := l["guest"].(map[string]any)
	if l["policy"] != "real" || l["level"] != "ERROR" || l["uid"] != nil || l["error"] != nil || l["source"] != "policy" || l["truncated"] != true {
		t.Errorf("top-level fields: %v", l)
	}
	if guest["policy"] != "other" || guest["uid"] != "u-1" || guest["error"] != "fake" {
		t.Errorf("guest fields: %v", guest)
	}
	if s, _ := guest["long"].(string); len(s) > 256 || !strings.HasPrefix(s, `"yyyy`) {
		t.Errorf("a 5000-byte field logged as %d bytes", len(s))
	}

	logTimes("chatty", 1000)
	n := len(jsonLines(t, logs.String(), "forged")) - 1
	mu.Lock()
	d := dropped["chatty"]
	mu.Unlock()
	// the burst, plus what the rate refills while the evaluation runs
	if n < 100 || n > 150 || n+d != 1000 {
		t.Errorf("1000 lines: %d logged, %d counted as dropped", n, d)
	}
	warn := jsonLines(t, logs.String(), "policy log lines dropped: the policy logs more than its rate limit")
	if len(warn) != 1 || warn[0]["policy"] != "chatty" || warn[0]["dropped"] != float64(1) {
		t.Errorf("drop warnings: %v", warn)
	}
	if dropped["real"] != 0 {
		t.Errorf("policy real: %d dropped", dropped["real"])
	}
}

// jsonLines decodes the JSON log lines whose msg is msg.
func jsonLines(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
