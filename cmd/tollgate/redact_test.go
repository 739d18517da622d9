package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/module"
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

// TestServeResolverMasksCredentials: serve's own refusal of a plain http://
// module from a host that is not an insecure source masks the URI too.
func TestServeResolverMasksCredentials(t *testing.T) {
	r := resolveWith(&module.Resolver{AllowHTTP: true}, config.Sources{InsecureSources: []string{"other:5000"}})
	_, _, err := r.ResolveDigest(context.Background(), "http://bob:pa55word@127.0.0.1:9/x.wasm?token=tok-secret1")
	if err == nil || strings.Contains(err.Error(), "pa55word") || strings.Contains(err.Error(), "tok-secret1") ||
		!strings.Contains(err.Error(), "insecure_sources") || !strings.Contains(err.Error(), "bob:xxxxx@") {
		t.Errorf("error: %v", err)
	}
}
