package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// The behaviours that end (everything but trap, loop and oom) are tested natively here; the others
// are exercised through the host by the root module's tests.

func run(t *testing.T, settings string) ([]byte, error) {
	t.Helper()
	return validate([]byte(`{"request": {"uid": "1"}, "settings": ` + settings + `}`))
}

func TestValidate(t *testing.T) {
	tests := []struct {
		settings string
		want     string
	}{
		{settings: `{}`, want: `{"accepted":true}`},
		{settings: `{"behaviour": "accept"}`, want: `{"accepted":true}`},
		{settings: `{"behaviour": "log"}`, want: `{"accepted":true}`},
		{settings: `{"behaviour": "invalid-json"}`, want: `this is not JSON {"accepted": true`},
		{settings: `{"behaviour": "mutate-non-object"}`, want: `{"accepted":true,"mutated_object":"not an object"}`},
		{settings: `{"behaviour": "mutate-non-object", "mutated_object": [1, 2]}`, want: `{"accepted":true,"mutated_object":[1,2]}`},
		{settings: `{"behaviour": "huge-output", "size": 3}`, want: `{"accepted":false,"code":400,"message":"xxx"}`},
		// Natively the waPC imports are stubs: a host call succeeds with an empty answer.
		{settings: `{"behaviour": "hostcall", "namespace": "net", "operation": "v1/dns_lookup_host", "payload": "localhost"}`, want: `{"accepted":true,"message":"host answered: "}`},
	}
	for _, tt := range tests {
		t.Run(tt.settings, func(t *testing.T) {
			out, err := run(t, tt.settings)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Errorf("got %s, want %s", out, tt.want)
			}
		})
	}
}

func TestHugeOutputDefaultSize(t *testing.T) {
	out, err := run(t, `{"behaviour": "huge-output"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50<<20 || !json.Valid(out) {
		t.Errorf("got %d bytes (valid JSON: %v), want a JSON document over 50 MiB", len(out), json.Valid(out))
	}
}

func TestValidateSettings(t *testing.T) {
	for _, b := range strings.Split(known(), ", ") {
		out, err := validateSettings([]byte(`{"behaviour": "` + b + `"}`))
		if err != nil || string(out) != `{"valid":true}` {
			t.Errorf("behaviour %q: got %s, %v", b, out, err)
		}
	}
	out, err := validateSettings([]byte(`{"behaviour": "explode"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"message":"unknown behaviour \"explode\" (known: accept, hostcall, huge-output, invalid-json, log, loop, mutate-non-object, oom, sleep, trap)","valid":false}`
	if string(out) != want {
		t.Errorf("got %s\nwant %s", out, want)
	}
}

func TestValidateUnknownBehaviourIsAnError(t *testing.T) {
	_, err := run(t, `{"behaviour": "explode"}`)
	if err == nil || !strings.Contains(err.Error(), `unknown behaviour "explode"`) {
		t.Errorf("got %v, want an error naming the behaviour", err)
	}
}
