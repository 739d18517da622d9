package status_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/server/status"
)

func TestDigest(t *testing.T) {
	if got, want := status.Digest([]byte("abc")), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("Digest = %s, want %s", got, want)
	}
}

func TestStatusServes(t *testing.T) {
	ps := status.Policies{ConfigDigest: "sha256:a", LastReload: status.Reload{OK: false, Digest: "sha256:b", Error: "malformed"},
		Policies: []status.Policy{
			{ID: "ok", State: status.StateReady},
			{ID: "stale", State: status.StateReady, Stale: true, Error: "settings rejected"},
			{ID: "failed", State: status.StateFailed, Error: "no module"},
			{ID: "loading", State: status.StateLoading},
		}}
	for _, tt := range []struct {
		digest, id string
		want       error
		msg        string
	}{
		{"sha256:a", "ok", nil, ""},
		{"sha256:a", "stale", status.ErrNotLoaded, "settings rejected"},
		{"sha256:a", "failed", status.ErrNotLoaded, "no module"},
		{"sha256:a", "loading", status.ErrNotLoaded, "still loading"},
		{"sha256:a", "absent", status.ErrNoPolicy, "absent"},
		{"sha256:b", "ok", status.ErrOtherConfig, "malformed"},
		{"sha256:c", "ok", status.ErrOtherConfig, "sha256:a"},
	} {
		err := ps.Serves(tt.digest, tt.id)
		if !errors.Is(err, tt.want) || tt.want != nil && !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Serves(%s, %s) = %v, want %v with %q", tt.digest, tt.id, err, tt.want, tt.msg)
		}
	}
}
