//go:build mapsteps

package main

// The per-step profile of docs/benchmarks/mutating-admission-policy.md in
// the module: built as a WASI command with -tags mapsteps and run with the
// repository mounted at / (see the docs for the command), it prints the cost
// of each step of the label evaluation of test/testdata/reviews/pod.json.

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/jsonengine"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

func runSteps() {
	if err := steps(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func steps() error {
	root := os.Getenv("MAPSTEPS_ROOT") // the repository (natively; / in the module)
	raw, err := os.ReadFile(root + "/test/testdata/reviews/pod.json")
	if err != nil {
		return err
	}
	y, err := os.ReadFile(root + "/policies/mutating-admission-policy/testdata/label-settings.yml")
	if err != nil {
		return err
	}
	settings, err := yaml.YAMLToJSON(y)
	if err != nil {
		return err
	}
	var review struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		return err
	}
	payload, _ := json.Marshal(protocol.ValidationRequest{Request: review.Request, Settings: settings})
	const n = 300
	time1 := func(name string, fn func() error) error {
		s, err := jsonengine.TimeStep(name, n, fn)
		if err == nil {
			printStep(s)
		}
		return err
	}
	start := time.Now()
	if _, err := validateSettings(settings); err != nil {
		return err
	}
	fmt.Printf("%-72s %9.1f us\n", "validate_settings (compiling the policy), once", float64(time.Since(start).Nanoseconds())/1e3)
	start = time.Now()
	out, err := validate(payload)
	if err != nil {
		return err
	}
	fmt.Printf("%-72s %9.1f us\n", "first validate (the tables decoded on first use)", float64(time.Since(start).Nanoseconds())/1e3)
	if err := time1("validate, whole (envelope, evaluation, response)", func() error { _, err := validate(payload); return err }); err != nil {
		return err
	}
	var req protocol.KubernetesAdmissionRequest
	if err := time1("envelope decoded (decodeEnvelope)", func() error {
		var ok bool
		if req, _, ok = decodeEnvelope(payload); !ok {
			return fmt.Errorf("declined")
		}
		return nil
	}); err != nil {
		return err
	}
	var object []byte
	if err := time1("response written (fastjson.MutateRequest)", func() error {
		var r protocol.ValidationResponse
		if object == nil {
			if err := json.Unmarshal(out, &r); err != nil {
				return err
			}
			object = r.MutatedObject
		}
		fastjson.MutateRequest(object)
		return nil
	}); err != nil {
		return err
	}
	steps, err := jsonengine.MeasureSteps(settings, &req, n)
	for _, s := range steps {
		printStep(s)
	}
	return err
}

func printStep(s jsonengine.Step) {
	fmt.Printf("%-72s mean %9.1f us  min %9.1f us\n", s.Name, float64(s.Mean.Nanoseconds())/1e3, float64(s.Min.Nanoseconds())/1e3)
}
