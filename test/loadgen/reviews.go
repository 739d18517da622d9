package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

// realisticReviews are the AdmissionReview fixtures of test/testdata/reviews
// (relative to the repository root, where make runs the load generator):
// objects of the size and shape clusters send.
var realisticReviews = []struct{ name, file string }{
	{"Pod, 5 KB", "test/testdata/reviews/pod.json"},
	{"Deployment", "test/testdata/reviews/deployment.json"},
	{"Service", "test/testdata/reviews/service.json"},
	{"Ingress", "test/testdata/reviews/ingress.json"},
	{"ConfigMap, 50 KB", "test/testdata/reviews/configmap-50k.json"},
}

// readReview reads an AdmissionReview file and compacts it (the fixtures are
// indented for reading; an apiserver sends compact JSON).
func readReview(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w (run from the repository root)", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return buf.Bytes(), nil
}

// realisticTable measures saturation throughput (closed loop, after a 1 s
// warm-up) on each realistic review, for the validating and the mutating
// example, on tollgate serve and on the native server: one process of each
// serves every row.
func (b *bench) realisticTable(tollgate string, conc int, dur time.Duration, serveArgs []string) error {
	bodies := make([][]byte, len(realisticReviews))
	for i, r := range realisticReviews {
		body, err := readReview(r.file)
		if err != nil {
			return err
		}
		bodies[i] = body
	}
	servers := []struct {
		name   string
		native bool
	}{{"tollgate", false}, {"native", true}}
	policies := []string{"required-labels", "capabilities-drop"}
	rps := map[string][]float64{}       // server/policy -> per review
	cpu := map[string][]time.Duration{} // server/policy -> the server's CPU per request, per review
	notes := map[string][]string{}
	for _, sv := range servers {
		p, port, _, err := b.start(sv.native, tollgate, serveArgs)
		if err != nil {
			return err
		}
		client := newClient(b.pool, conc)
		for _, pol := range policies {
			url := "https://127.0.0.1:" + strconv.Itoa(port) + "/validate/" + pol
			k := sv.name + "/" + pol
			for i, body := range bodies {
				if err := send(client, url, body, true); err != nil {
					p.stop()
					return fmt.Errorf("%s %s %s: %w\n%s", sv.name, pol, realisticReviews[i].file, err, p.log)
				}
				closedLoop(client, url, body, true, conc, time.Second)
				cpu0 := p.cpuTime()
				r := closedLoop(client, url, body, true, conc, dur)
				perReq := time.Duration(0)
				if r.Requests > 0 {
					perReq = (p.cpuTime() - cpu0) / time.Duration(r.Requests)
				}
				rps[k] = append(rps[k], r.RPS)
				cpu[k] = append(cpu[k], perReq)
				notes[k] = append(notes[k], errNote(r))
			}
		}
		p.stop()
	}
	fmt.Printf("\nRealistic objects (test/testdata/reviews), saturation req/s at c=%d, %v per run; tollgate / native in brackets, "+
		"then the server's CPU time per request (user + system, /proc/PID/stat):\n\n", conc, dur)
	fmt.Println("| review (compact bytes) | tollgate required-labels | native required-labels | tollgate capabilities-drop | native capabilities-drop |")
	fmt.Println("|---|---|---|---|---|")
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f us", float64(d.Nanoseconds())/1e3) }
	for i, r := range realisticReviews {
		row := fmt.Sprintf("| %s (%d) |", r.name, len(bodies[i]))
		for _, pol := range policies {
			t, n := rps["tollgate/"+pol][i], rps["native/"+pol][i]
			row += fmt.Sprintf(" %.0f%s (%.0f%%), %s CPU | %.0f%s, %s CPU |", t, notes["tollgate/"+pol][i], 100*t/n, us(cpu["tollgate/"+pol][i]),
				n, notes["native/"+pol][i], us(cpu["native/"+pol][i]))
		}
		fmt.Println(row)
	}
	return nil
}
