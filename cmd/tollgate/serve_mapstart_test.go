package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/tollgate-dev/tollgate/host/builtin"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// Issue 31's start-up targets for `tollgate serve` with 8 MutatingAdmissionPolicy policies and an
// empty compilation cache, which BenchmarkServeMAPColdStart reports against (on a quiet machine),
// and the test's ceilings, generous enough for a loaded 2-core machine: the cold compile of the
// module is most of the start and runs several times slower there. The RSS ceiling still fails
// the standard-Go build of the built-in (351 MB after one request to each, docs/benchmarks).
const (
	mapStartPatchTarget  = 5 * time.Second
	mapStartRSSTarget    = 150 << 20
	mapStartPatchCeiling = 30 * time.Second
	mapStartRSSCeiling   = 250 << 20
)

// mapStartPolicy is one of the 8: its id, and what its patch must do to the 5 KB Pod.
type mapStartPolicy struct {
	id     string
	expect func(pod map[string]any) // the change the policy's patch makes
}

// mapStartPolicies is the policies.yml of the 8 MAP policies, each with settings of its own: 4
// ApplyConfiguration ones adding the label team=payments-<i> (label-settings.yml) and 4 JSONPatch
// ones adding the init container mesh/proxy:v1.0.<i> (sidecar-any-pod-settings.yml).
func mapStartPolicies(tb testing.TB) (string, []mapStartPolicy) {
	tb.Helper()
	label := string(testfixture.File(tb, "policies/mutating-admission-policy/testdata/label-settings.yml"))
	sidecar := string(testfixture.File(tb, "policies/mutating-admission-policy/testdata/sidecar-any-pod-settings.yml"))
	if !strings.Contains(label, `\"payments\"`) || !strings.Contains(sidecar, "mesh/proxy:v1.0.0") {
		tb.Fatal("label-settings.yml or sidecar-any-pod-settings.yml changed: the strings made distinct are gone")
	}
	var yml strings.Builder
	var ps []mapStartPolicy
	add := func(id, settings string, expect func(map[string]any)) {
		fmt.Fprintf(&yml, "%s:\n  module: builtin://mutating-admission-policy\n  allowedToMutate: true\n  settings:\n", id)
		for _, l := range strings.Split(strings.TrimRight(settings, "\n"), "\n") {
			yml.WriteString("    " + l + "\n")
		}
		ps = append(ps, mapStartPolicy{id, expect})
	}
	for i := range 4 {
		team := fmt.Sprintf("payments-%d", i)
		add(fmt.Sprintf("label-%d", i), strings.ReplaceAll(label, `\"payments\"`, `\"`+team+`\"`), func(pod map[string]any) {
			pod["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = team
		})
		image := fmt.Sprintf("mesh/proxy:v1.0.%d", i)
		add(fmt.Sprintf("sidecar-%d", i), strings.ReplaceAll(sidecar, "mesh/proxy:v1.0.0", image), func(pod map[string]any) {
			pod["spec"].(map[string]any)["initContainers"] = []any{map[string]any{
				"name": "mesh-proxy", "image": image, "args": []any{"proxy", "sidecar"}, "restartPolicy": "Always",
				"resources": map[string]any{}, // as Kubernetes' plugin writes it (test/mapdiff)
			}}
		})
	}
	return yml.String(), ps
}

// mapStart is what one cold start measured.
type mapStart struct {
	firstPatch time.Duration // from exec to the first MAP answer with its (checked) patch
	all        time.Duration // one request to each policy, after the first patch
	rss, hwm   int64         // VmRSS and VmHWM after one request to each policy
}

// measureMAPStart starts `tollgate serve` (the real binary, HTTPS with a generated CA) with the
// 8 MAP policies and an empty compilation cache, sends the 5 KB Pod to label-0 from the moment
// of exec until an answer comes with a patch, then one request to each policy, checking that
// each patch makes exactly its policy's change, and reads the process's memory.
func measureMAPStart(tb testing.TB) mapStart {
	tb.Helper()
	if !slices.Contains(builtin.Names(), "mutating-admission-policy") {
		tb.Fatalf("built-in modules compiled in: %v; run `make policies` (the MutatingAdmissionPolicy built-in is missing)", builtin.Names())
	}
	yml, policies := mapStartPolicies(tb)
	review := testfixture.File(tb, "test/testdata/reviews/pod.json")
	var ar struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(review, &ar); err != nil || len(ar.Request.Object) == 0 {
		tb.Fatalf("test/testdata/reviews/pod.json: %v", err)
	}
	certs, err := server.EnsureSelfSigned(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CAFile)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()

	p := startServeProcessOn(tb, yml, []string{"--cert-file=" + certs.CertFile, "--key-file=" + certs.KeyFile}, "--log-level=warn")
	// answer posts the review to id: the patch of an allowed answer with one ("" for none), or
	// why there is no AdmissionReview (err: transport; msg: anything but an AdmissionReview).
	answer := func(id string) (patch []byte, msg string, err error) {
		resp, err := client.Post("https://127.0.0.1:"+strconv.Itoa(p.port)+"/validate/"+id, "application/json", bytes.NewReader(review))
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var rv struct {
			Response *struct {
				Allowed bool   `json:"allowed"`
				Patch   []byte `json:"patch"`
				Status  struct {
					Message string `json:"message"`
				} `json:"status"`
			} `json:"response"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &rv) != nil || rv.Response == nil {
			return nil, fmt.Sprintf("HTTP %d: %.300s", resp.StatusCode, b), nil
		}
		if !rv.Response.Allowed || len(rv.Response.Patch) == 0 {
			return nil, fmt.Sprintf("allowed=%t with no patch: %s", rv.Response.Allowed, rv.Response.Status.Message), nil
		}
		return rv.Response.Patch, "", nil
	}
	// check applies patch to the request's object: it must be the object with pol's change only.
	check := func(pol mapStartPolicy, patch []byte) {
		tb.Helper()
		var want, got map[string]any
		if err := json.Unmarshal(ar.Request.Object, &want); err != nil {
			tb.Fatal(err)
		}
		pol.expect(want)
		var out []byte
		ops, err := jsonpatch.DecodePatch(patch)
		if err == nil {
			out, err = ops.Apply(ar.Request.Object)
		}
		if err == nil {
			err = json.Unmarshal(out, &got)
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			wantJSON, _ := json.Marshal(want)
			tb.Fatalf("%s: the patch %s does not make the policy's change (%v):\ngot  %s\nwant %s", pol.id, patch, err, out, wantJSON)
		}
	}

	var m mapStart
	var last string
	for {
		patch, msg, err := answer(policies[0].id)
		if err == nil && msg == "" {
			m.firstPatch = time.Since(p.started)
			check(policies[0], patch)
			break
		}
		if err != nil {
			msg = err.Error()
		}
		last = msg
		select {
		case <-p.exited:
			tb.Fatalf("serve exited before answering (%v); last answer: %s", p.cmd.ProcessState, last)
		default:
		}
		if time.Since(p.started) > mapStartPatchCeiling {
			tb.Fatalf("no patched answer from %s within %v of exec; last answer: %s", policies[0].id, mapStartPatchCeiling, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every policy has loaded by now: serve answers a policy once its own load has ended, and
	// the 8 share one compiled module.
	if code, body := probeGet(p.probe, "/readiness"); code != http.StatusOK {
		tb.Fatalf("/readiness after the first patch: HTTP %d %s", code, body)
	}
	begin := time.Now()
	for _, pol := range policies {
		patch, msg, err := answer(pol.id)
		if err != nil || msg != "" {
			tb.Fatalf("%s: no patched answer: %v %s", pol.id, err, msg)
		}
		check(pol, patch)
	}
	m.all = time.Since(begin)
	m.rss, m.hwm = p.memory("VmRSS"), p.memory("VmHWM")
	if m.rss <= 0 || m.hwm <= 0 {
		tb.Fatalf("cannot read the server's memory (/proc/%d/status)", p.cmd.Process.Pid)
	}
	p.terminate(30 * time.Second)
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(p.pfile), "cache", "*")); len(matches) == 0 {
		tb.Fatal("the compilation cache directory stayed empty: was the start cold?")
	}
	return m
}

func (m mapStart) String() string {
	return fmt.Sprintf("first MAP patch %v after exec; one request to each of the 8 policies %v; then VmRSS %d MiB, VmHWM %d MiB",
		m.firstPatch.Round(time.Millisecond), m.all.Round(time.Millisecond), m.rss>>20, m.hwm>>20)
}

// TestServeMAPColdStart: `tollgate serve` (the real process, HTTPS) with 8 MutatingAdmissionPolicy
// policies of different settings and an empty compilation cache answers its first MAP request
// with the right patch within a generous ceiling of its exec, each of the 8 then answers with
// exactly its own change, and the process stays under a generous RSS ceiling (issue 31; the
// targets themselves are BenchmarkServeMAPColdStart's).
func TestServeMAPColdStart(t *testing.T) {
	m := measureMAPStart(t)
	t.Logf("cold start, 8 MAP policies: %v (load average %s)", m, loadAverage())
	if m.firstPatch > mapStartPatchCeiling {
		t.Errorf("first MAP patch %v after exec, ceiling %v", m.firstPatch, mapStartPatchCeiling)
	}
	if m.rss > mapStartRSSCeiling {
		t.Errorf("VmRSS %d MiB after one request to each policy, ceiling %d MiB", m.rss>>20, mapStartRSSCeiling>>20)
	}
}

// BenchmarkServeMAPColdStart measures TestServeMAPColdStart's cold start once per iteration
// (`make bench-map-start`) and reports it against issue 31's targets: the first MAP patch within
// 5 s of exec and VmRSS <= 150 MiB after one request to each policy, on a quiet machine.
func BenchmarkServeMAPColdStart(b *testing.B) {
	tollgateBinary(b) // built before the timed loop
	var patch, rss float64
	for b.Loop() {
		m := measureMAPStart(b)
		met := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		b.Logf("%v (targets: patch <= %v %s, VmRSS <= %d MiB %s; load average %s)", m, mapStartPatchTarget, met(m.firstPatch <= mapStartPatchTarget),
			mapStartRSSTarget>>20, met(m.rss <= mapStartRSSTarget), loadAverage())
		patch = max(patch, m.firstPatch.Seconds())
		rss = max(rss, float64(m.rss>>20))
	}
	b.ReportMetric(patch, "max-first-patch-s")
	b.ReportMetric(rss, "max-VmRSS-MiB")
}

// loadAverage is /proc/loadavg's three averages, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
