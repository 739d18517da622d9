package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/metadata"
)

// TestCLIMasksCredentials: the CLI's errors and output show a module URI's
// credentials masked.
func TestCLIMasksCredentials(t *testing.T) {
	uri := "https://bob:pa55word@127.0.0.1:1/x.wasm?access_token=tok-secret1"
	for _, args := range [][]string{{"inspect", uri}, {"run", uri, "-r", ex("required-labels/testdata/pod-no-labels.json")}} {
		out, err := tollgate(t, "", args...)
		if err == nil {
			t.Fatalf("%s: no error", args[0])
		}
		all := out + err.Error()
		if strings.Contains(all, "pa55word") || strings.Contains(all, "tok-secret1") || !strings.Contains(all, "https://bob:xxxxx@127.0.0.1:1/x.wasm?access_token=xxxxx") {
			t.Errorf("%s: %v\n%s", args[0], err, out)
		}
	}
	var b bytes.Buffer
	if err := printMetadata(&b, uri, "sha256:00", 8, &metadata.Metadata{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "pa55word") || !strings.Contains(b.String(), "bob:xxxxx@") {
		t.Errorf("inspect prints:\n%s", b.String())
	}
}
