package verify

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Files is a ModuleFetcher whose Verifier comes from files that may change in
// place (a Kubernetes ConfigMap volume swaps them through a symlink): a
// verification config and, optionally, a trust root. Every module is verified
// (cached by digest) and fetched pinned to the verified digest. Watch looks
// at the files; a change makes a new Verifier (an empty cache).
type Files struct {
	// ConfigPath is the verification config, TrustPath the trust root (""
	// for the public-good root, fetched when the config needs one).
	ConfigPath, TrustPath string
	// ConfigName and TrustName name the files in errors (the flags that
	// gave them).
	ConfigName, TrustName string
	// Registry reads signatures; Inner fetches the verified modules.
	Registry Registry
	Inner    ModuleFetcher

	v                    atomic.Pointer[Verifier]
	cfgBytes, trustBytes []byte // what v was made from (Load's only writer is Watch, after the first)
}

// Load reads the config and trust root files and, when they changed (or on
// the first call), makes a new Verifier. An empty config is an error: a
// file caught half-written must not drop every requirement.
func (f *Files) Load() (changed bool, err error) {
	cb, err := os.ReadFile(f.ConfigPath)
	if err != nil {
		return false, fmt.Errorf("%s: %w", f.ConfigName, err)
	}
	var tb []byte
	if f.TrustPath != "" {
		if tb, err = os.ReadFile(f.TrustPath); err != nil {
			return false, fmt.Errorf("%s: %w", f.TrustName, err)
		}
	}
	if f.v.Load() != nil && bytes.Equal(cb, f.cfgBytes) && bytes.Equal(tb, f.trustBytes) {
		return false, nil
	}
	if len(bytes.TrimSpace(cb)) == 0 {
		return false, fmt.Errorf("%s: %s is empty", f.ConfigName, f.ConfigPath)
	}
	cfg, err := ParseConfig(f.ConfigPath, cb)
	if err != nil {
		return false, fmt.Errorf("%s: %w", f.ConfigName, err)
	}
	opts := Options{Registry: f.Registry}
	if f.TrustPath != "" {
		tr, err := ParseTrustRoot(f.TrustPath, tb)
		if err != nil {
			return false, fmt.Errorf("%s: %w", f.TrustName, err)
		}
		opts.TrustRoot = tr
	} else if cfg.NeedsTrustRoot() {
		tr, err := FetchPublicGood("")
		if err != nil {
			return false, err
		}
		opts.TrustRoot = tr
	}
	v, err := New(cfg, opts)
	if err != nil {
		return false, fmt.Errorf("%s: %w", f.ConfigName, err)
	}
	f.v.Store(v)
	f.cfgBytes, f.trustBytes = cb, tb
	return true, nil
}

// Verifier is the current Verifier (nil before a Load succeeded).
func (f *Files) Verifier() *Verifier { return f.v.Load() }

// Fetch verifies and fetches with the current Verifier.
func (f *Files) Fetch(ctx context.Context, uri string) ([]byte, string, error) {
	fe := Fetcher{Verifier: f.v.Load(), Inner: f.Inner}
	return fe.Fetch(ctx, uri)
}

// Watch loads the files every interval until ctx ends. A change that loads
// calls changed; a change that does not load keeps the current Verifier and
// calls rejected once (until a load succeeds again: then recovered, when
// the files are back to what the current Verifier was made from).
func (f *Files) Watch(ctx context.Context, interval time.Duration, changed, recovered func(), rejected func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	isRejected := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ch, err := f.Load()
		if err != nil {
			if !isRejected {
				rejected(err)
			}
			isRejected = true
			continue
		}
		if ch {
			changed()
		} else if isRejected {
			recovered()
		}
		isRejected = false
	}
}
