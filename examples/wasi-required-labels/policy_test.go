package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/wasi"
)

// run runs the policy natively, as the host runs the module: argv, stdin, stdout.
func run(t *testing.T, command, stdin string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := wasi.Run(wasi.Policy{Validate: validate, ValidateSettings: validateSettings},
		[]string{"policy.wasm", command}, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func request(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.ReadFile("testdata/settings.json")
	if err != nil {
		t.Fatal(err)
	}
	return `{"request":` + string(b) + `,"settings":` + string(s) + `}`
}

func TestValidate(t *testing.T) {
	if code, out, _ := run(t, "validate", request(t, "pod-labelled.json")); code != 0 || out != `{"accepted":true}` {
		t.Fatalf("labelled: %d %s", code, out)
	}
	if code, out, _ := run(t, "validate", request(t, "pod-missing-app.json")); code != 0 || out != `{"accepted":false,"message":"bad lacks the required labels: app"}` {
		t.Fatalf("missing: %d %s", code, out)
	}
	if code, _, stderr := run(t, "validate", `not json`); code != 1 || !strings.Contains(stderr, "cannot decode the request") {
		t.Fatalf("garbage: %d %s", code, stderr)
	}
}

func TestValidateSettings(t *testing.T) {
	for stdin, want := range map[string]string{
		`{"required_labels":["team"]}`: `{"valid":true}`,
		`{"required_labels":[]}`:       `{"valid":false,"message":"required_labels must list at least one label"}`,
		`{"required_labels":[""]}`:     `{"valid":false,"message":"required_labels must not hold an empty name"}`,
		`{"required_labels":"team"}`:   `{"valid":false,"message":"settings: json: cannot unmarshal string into Go struct field settings.required_labels of type []string"}`,
	} {
		if code, out, _ := run(t, "validate-settings", stdin); code != 0 || out != want {
			t.Errorf("%s: %d %s, want %s", stdin, code, out, want)
		}
	}
}
