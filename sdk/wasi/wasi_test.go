package wasi_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/wasi"
)

func TestRun(t *testing.T) {
	p := wasi.Policy{
		Validate: func(payload []byte) ([]byte, error) {
			if bytes.Contains(payload, []byte("boom")) {
				return nil, errors.New("boom happened")
			}
			if bytes.Contains(payload, []byte("bad")) {
				return wasi.Reject("bad request", 403)
			}
			return wasi.Accept()
		},
	}
	for _, tc := range []struct {
		args           []string
		stdin          string
		code           int
		stdout, stderr string
	}{
		{[]string{"policy.wasm", "validate"}, `{"request":{}}`, 0, `{"accepted":true}`, ""},
		{[]string{"policy.wasm", "validate"}, `{"request":"bad"}`, 0, `{"accepted":false,"message":"bad request","code":403}`, ""},
		{[]string{"policy.wasm", "validate"}, `boom`, 1, "", "boom happened\n"},
		{[]string{"policy.wasm", "validate-settings"}, `{}`, 0, `{"valid":true}`, ""},
		{[]string{"policy.wasm", "frobnicate"}, ``, 1, "", `unknown command "frobnicate"`},
		{[]string{"policy.wasm"}, ``, 1, "", "usage: policy.wasm validate|validate-settings"},
	} {
		var out, errOut bytes.Buffer
		code := wasi.Run(p, tc.args, strings.NewReader(tc.stdin), &out, &errOut)
		if code != tc.code || out.String() != tc.stdout || !strings.Contains(errOut.String(), tc.stderr) {
			t.Errorf("%v %q: code %d stdout %q stderr %q", tc.args, tc.stdin, code, out.String(), errOut.String())
		}
	}
}

func TestAnswers(t *testing.T) {
	b, _ := wasi.Mutate(map[string]any{"a": 1})
	if string(b) != `{"accepted":true,"mutated_object":{"a":1}}` {
		t.Errorf("Mutate: %s", b)
	}
	b, _ = wasi.SettingsInvalid("no")
	if string(b) != `{"valid":false,"message":"no"}` {
		t.Errorf("SettingsInvalid: %s", b)
	}
	b, _ = wasi.Reject("x", 0)
	if string(b) != `{"accepted":false,"message":"x"}` {
		t.Errorf("Reject: %s", b)
	}
	if _, err := wasi.HostCall("kubewarden", "ns", "op", nil); err == nil {
		t.Error("HostCall works outside wasip1")
	}
}
