package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// kubeletVolume writes a ConfigMap or Secret volume the way kubelet's
// AtomicWriter (pkg/volume/util/atomic_writer.go) does: the files go into a
// new timestamped directory (..2026_11_25_03_40_00.NNN), a symlink
// ..data_tmp to it is renamed over ..data, each file is a symlink
// name -> ..data/name created once, and the previous timestamped directory
// is removed.
type kubeletVolume struct {
	t   testing.TB
	dir string
	ts  string // the current timestamped directory
}

func newKubeletVolume(t testing.TB, dir string) *kubeletVolume {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &kubeletVolume{t: t, dir: dir}
}

func (v *kubeletVolume) write(files map[string]string) {
	v.t.Helper()
	ts, err := os.MkdirTemp(v.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		v.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				v.t.Fatal(err)
			}
		}
	}
	if v.ts != "" {
		if err := os.RemoveAll(v.ts); err != nil {
			v.t.Fatal(err)
		}
	}
	v.ts = ts
}

// loop sends POST url with body from two goroutines until stopped, at most
// loopMax requests each, and counts the answers that are not HTTP 200 with an
// allowed AdmissionReview. newConn makes every request a new TLS handshake.
type loop struct {
	stop       chan struct{}
	wg         sync.WaitGroup
	ok, failed atomic.Int64
	firstErr   atomic.Value
	client     *http.Client
	url        string
	body       []byte
	newConn    bool
}

const loopMax = 2000

func startLoop(client *http.Client, url string, body []byte, newConn bool) *loop {
	l := &loop{stop: make(chan struct{}), client: client, url: url, body: body, newConn: newConn}
	for i := 0; i < 2; i++ {
		l.wg.Add(1)
		go l.run()
	}
	return l
}

func (l *loop) run() {
	defer l.wg.Done()
	for n := 0; n < loopMax; n++ {
		select {
		case <-l.stop:
			return
		default:
		}
		if l.newConn {
			l.client.CloseIdleConnections()
		}
		resp, err := l.client.Post(l.url, "application/json", strings.NewReader(string(l.body)))
		if err != nil {
			l.failed.Add(1)
			l.firstErr.CompareAndSwap(nil, err.Error())
			continue
		}
		var rv admission.Review
		err = json.NewDecoder(resp.Body).Decode(&rv)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || rv.Response == nil || !rv.Response.Allowed {
			l.failed.Add(1)
			l.firstErr.CompareAndSwap(nil, fmt.Sprintf("HTTP %d %v %+v", resp.StatusCode, err, rv.Response))
			continue
		}
		l.ok.Add(1)
	}
}

// finish stops the loop and fails t if a request failed or none went through.
func (l *loop) finish(t testing.TB) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if l.failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed; first: %v", l.failed.Load(), l.failed.Load()+l.ok.Load(), l.firstErr.Load())
	}
	if l.ok.Load() < 10 {
		t.Fatalf("only %d requests went through", l.ok.Load())
	}
	t.Logf("%d requests, 0 failed", l.ok.Load())
}

// TestConfigMapVolumeReload: policies.yml in a ConfigMap volume, updated as
// kubelet does, is reloaded within seconds: /policies shows the new file's
// digest, the new settings decide, and no request fails during the swaps
// (the second swap proves the watch survives the removal of the directory
// the first one served from).
func TestConfigMapVolumeReload(t *testing.T) {
	labels := wasmPath(t, "examples/required-labels")
	file := func(label string) string {
		return fmt.Sprintf("labels:\n  module: %s\n  settings: {mandatory_labels: [%s]}\n", labels, label)
	}
	h := start(t, harnessOpts{policies: file("owner"), volume: true, watch: true})
	if pl := h.policies(); pl.ConfigDigest != status.Digest([]byte(file("owner"))) {
		t.Fatalf("configDigest at start %q", pl.ConfigDigest)
	}
	both := reviewFor("both", "CREATE", "default", pod(map[string]string{"owner": "x", "team": "y"}))
	ownerOnly := reviewFor("owner", "CREATE", "default", pod(map[string]string{"owner": "x"}))
	l := startLoop(h.client, h.base+"/validate/labels", both, false)
	for i, label := range []string{"team", "owner"} {
		want := status.Digest([]byte(file(label)))
		swapped := time.Now()
		h.volume.write(map[string]string{"policies.yml": file(label)})
		// The file's digest shows in /policies as soon as its load starts;
		// the policy serves the new settings once Serves says so (until
		// then the previous version answers).
		for {
			pl := h.policies()
			err := pl.Serves(want, "labels")
			if err == nil {
				break
			}
			if time.Since(swapped) > 60*time.Second {
				t.Fatalf("swap %d: the new file is not served after 60s: %v", i+1, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("swap %d: new configDigest served after %v", i+1, time.Since(swapped).Round(time.Millisecond))
		if _, r := h.review("/validate/labels", ownerOnly); r.Allowed != (label == "owner") {
			t.Fatalf("swap %d (mandatory label %s): a Pod with only an owner label: allowed %v", i+1, label, r.Allowed)
		}
		if pl := h.policies(); !pl.LastReload.OK || pl.LastReload.Trigger != "file" || pl.Serves(want, "labels") != nil {
			t.Fatalf("swap %d: /policies %+v", i+1, pl)
		}
	}
	l.finish(t)
}

// TestSecretVolumeCertRotation: the serving certificate and key in a Secret
// volume, rotated as kubelet does, are served within seconds (by the file
// watch: the poll is the production 10 s), and no request fails meanwhile,
// each on a new TLS handshake.
func TestSecretVolumeCertRotation(t *testing.T) {
	dir := t.TempDir()
	caFile, issue := newCA(t, dir, "vol")
	pair := func(cn string) map[string]string {
		c, k := issue(cn, false)
		cb, _ := os.ReadFile(c)
		kb, _ := os.ReadFile(k)
		return map[string]string{"tls.crt": string(cb), "tls.key": string(kb)}
	}
	secret := newKubeletVolume(t, filepath.Join(dir, "pki"))
	secret.write(pair("first"))
	h, servedCN, client := startWithCertFiles(t, filepath.Join(secret.dir, "tls.crt"), filepath.Join(secret.dir, "tls.key"), caFile, 10*time.Second)
	if cn := servedCN(); cn != "first" {
		t.Fatalf("serving %q", cn)
	}
	l := startLoop(client, h.base+"/validate/ok", reviewFor("r", "CREATE", "d", pod(nil)), true)
	for _, cn := range []string{"second", "third"} {
		rotated := time.Now()
		secret.write(pair(cn))
		for servedCN() != cn {
			if time.Since(rotated) > 5*time.Second {
				t.Fatalf("certificate %s not served within 5s", cn)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("certificate %s served after %v", cn, time.Since(rotated).Round(time.Millisecond))
	}
	l.finish(t)
}

// TestChangeDuringFirstLoadIsServed: the file changes after New read it and before Start
// watches it (as when the operator rewrites the ConfigMap while a new server loads its first
// set): Start reads it again, so the change is served without waiting for another event.
func TestChangeDuringFirstLoadIsServed(t *testing.T) {
	labels := wasmPath(t, "examples/required-labels")
	file := func(label string) string {
		return fmt.Sprintf("labels:\n  module: %s\n  settings: {mandatory_labels: [%s]}\n", labels, label)
	}
	h := start(t, harnessOpts{policies: file("owner"), volume: true, watch: true, noStart: true})
	h.volume.write(map[string]string{"policies.yml": file("team")})
	if err := h.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.srv.Shutdown(ctx)
	})
	want := status.Digest([]byte(file("team")))
	var got status.Policies
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := http.Get("http://" + h.srv.ProbeAddr() + "/policies")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
		}
		if err == nil && got.ConfigDigest == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file written before Start is not served after 5s: configDigest %q, want %q (err %v)", got.ConfigDigest, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
