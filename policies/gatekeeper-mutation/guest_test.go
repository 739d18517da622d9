package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestSystemCacheEvicts cycles through more distinct settings than the cache
// of compiled settings holds, twice: every answer carries its own settings'
// label value, whether its System was cached or compiled again after
// eviction.
func TestSystemCacheEvicts(t *testing.T) {
	base, err := os.ReadFile("testdata/settings-bench.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(base), `"tollgate"`) {
		t.Fatal(`testdata/settings-bench.json no longer sets the value "tollgate"`)
	}
	n := maxCachedSettings + 3
	dir := t.TempDir()
	payloadOf := func(i int) []byte {
		s := strings.ReplaceAll(string(base), `"tollgate"`, fmt.Sprintf(`"tollgate-%d"`, i))
		path := fmt.Sprintf("%s/settings-%d.json", dir, i)
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return validationRequest(t, "../../test/testdata/reviews/pod.json", path)
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < n; i++ {
			out, err := validate(payloadOf(i))
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`"mutated-by":"tollgate-%d"`, i); !strings.Contains(string(out), want) {
				t.Fatalf("round %d, settings %d: want %s in %.300s", round, i, want, out)
			}
		}
	}
	if got := compiled.lru.Len(); got != maxCachedSettings {
		t.Fatalf("%d compiled settings cached, want %d", got, maxCachedSettings)
	}
}
