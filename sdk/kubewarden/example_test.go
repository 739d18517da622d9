//go:build !wasip1

package kubewarden_test

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
)

func ExampleAcceptRequest() {
	resp, _ := kubewarden.AcceptRequest()
	fmt.Println(string(resp))
	// Output: {"accepted":true}
}

func ExampleRejectRequest() {
	resp, _ := kubewarden.RejectRequest("image evil.io/x is not allowed", 403)
	fmt.Println(string(resp))
	// Output: {"accepted":false,"message":"image evil.io/x is not allowed","code":403}
}

func ExampleMutateRequest() {
	pod := map[string]any{"kind": "Pod", "metadata": map[string]any{"labels": map[string]string{"team": "a"}}}
	resp, _ := kubewarden.MutateRequest(pod)
	fmt.Println(string(resp))

	_, err := kubewarden.MutateRequest("not an object")
	fmt.Println(err)
	// Output:
	// {"accepted":true,"mutated_object":{"kind":"Pod","metadata":{"labels":{"team":"a"}}}}
	// kubewarden: the mutated object must be a JSON object, got "\"not an object\""
}

func ExampleWithWarnings() {
	resp, _ := kubewarden.AcceptRequest(kubewarden.WithWarnings("image uses the latest tag"))
	fmt.Println(string(resp))
	// Output: {"accepted":true,"warnings":["image uses the latest tag"]}
}

func ExampleWithAuditAnnotations() {
	resp, _ := kubewarden.RejectRequest("denied", kubewarden.NoCode,
		kubewarden.WithAuditAnnotations(map[string]string{"registry": "evil.io"}))
	fmt.Println(string(resp))
	// Output: {"accepted":false,"message":"denied","audit_annotations":{"registry":"evil.io"}}
}

func ExampleAcceptSettings() {
	resp, _ := kubewarden.AcceptSettings()
	fmt.Println(string(resp))
	// Output: {"valid":true}
}

func ExampleRejectSettings() {
	resp, _ := kubewarden.RejectSettings("registries must not be empty")
	fmt.Println(string(resp))
	// Output: {"valid":false,"message":"registries must not be empty"}
}

func ExampleParseValidationRequest() {
	payload := []byte(`{"request":{"uid":"42","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"operation":"CREATE","object":{"spec":{"containers":[{"image":"nginx"}]}}},` +
		`"settings":{"registries":["docker.io"]}}`)
	var settings struct {
		Registries []string `json:"registries"`
	}
	req, err := kubewarden.ParseValidationRequest(payload, &settings)
	fmt.Println(req.UID, req.Kind.Kind, req.Operation, settings.Registries, err)

	var pod struct {
		Spec struct {
			Containers []struct{ Image string } `json:"containers"`
		} `json:"spec"`
	}
	_ = json.Unmarshal(req.Object, &pod)
	fmt.Println(pod.Spec.Containers[0].Image)
	// Output:
	// 42 Pod CREATE [docker.io] <nil>
	// nginx
}

func ExampleParseSettings() {
	settings := struct {
		Registries []string `json:"registries"`
		PullAlways bool     `json:"pullAlways"`
	}{PullAlways: true} // a default
	err := kubewarden.ParseSettings([]byte(`{"registries":["ghcr.io"]}`), &settings)
	fmt.Println(settings, err)
	err = kubewarden.ParseSettings([]byte(`{"registries":"ghcr.io"}`), &settings)
	fmt.Println(err)
	// Output:
	// {[ghcr.io] true} <nil>
	// kubewarden: settings: json: cannot unmarshal string into Go struct field .registries of type []string
}

// printLogs answers the host call kubewarden/tracing/log in the native build
// by printing the record.
func printLogs() (restore func()) {
	prev := guest.SetHostCallHandler(func(binding, namespace, operation string, payload []byte) ([]byte, error) {
		fmt.Printf("%s/%s/%s %s\n", binding, namespace, operation, payload)
		return nil, nil
	})
	return func() { guest.SetHostCallHandler(prev) }
}

func ExampleNewLogger() {
	defer printLogs()()

	log := kubewarden.NewLogger(slog.LevelDebug)
	log.Debug("validating", "uid", "42")
	log.Warn("image uses the latest tag", "image", "nginx:latest")
	// Output:
	// kubewarden/tracing/log {"level":"debug","message":"validating","uid":"42"}
	// kubewarden/tracing/log {"level":"warning","message":"image uses the latest tag","image":"nginx:latest"}
}

func ExampleNewLogHandler() {
	defer printLogs()()

	h := kubewarden.NewLogHandler(&slog.HandlerOptions{Level: slog.LevelInfo})
	slog.New(h).With("policy", "registries").Info("settings loaded", "count", 2)
	// Output: kubewarden/tracing/log {"level":"info","message":"settings loaded","policy":"registries","count":2}
}

func ExampleLogWriter() {
	defer printLogs()()

	// Any logger that writes one JSON object per line works, onelog included.
	_, _ = fmt.Fprintln(kubewarden.LogWriter{}, `{"level":"info","message":"hello"}`)
	// Output: kubewarden/tracing/log {"level":"info","message":"hello"}
}
