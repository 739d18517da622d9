// Command wasi-required-labels is a Kubewarden-compatible policy in the WASI
// execution mode (executionMode: wasi): a standard-Go command that reads its
// document from stdin and writes its answer to stdout, through tollgate's
// sdk/wasi. It rejects objects that lack any of the labels listed in the
// settings (required_labels).
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -ldflags=-s -o policy.wasm .
package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/wasi"
)

func main() {
	wasi.Main(wasi.Policy{Validate: validate, ValidateSettings: validateSettings})
}

type settings struct {
	RequiredLabels []string `json:"required_labels"`
}

func parseSettings(b []byte) (settings, error) {
	var s settings
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("settings: %w", err)
	}
	if len(s.RequiredLabels) == 0 {
		return s, fmt.Errorf("required_labels must list at least one label")
	}
	for _, l := range s.RequiredLabels {
		if l == "" {
			return s, fmt.Errorf("required_labels must not hold an empty name")
		}
	}
	return s, nil
}

func validateSettings(b []byte) ([]byte, error) {
	if _, err := parseSettings(b); err != nil {
		return wasi.SettingsInvalid(err.Error())
	}
	return wasi.SettingsValid()
}

func validate(payload []byte) ([]byte, error) {
	var in struct {
		Request struct {
			Object struct {
				Metadata struct {
					Name   string            `json:"name"`
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
			} `json:"object"`
		} `json:"request"`
		Settings json.RawMessage `json:"settings"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, fmt.Errorf("cannot decode the request: %w", err)
	}
	s, err := parseSettings(in.Settings)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, l := range s.RequiredLabels {
		if _, ok := in.Request.Object.Metadata.Labels[l]; !ok {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return wasi.Reject(fmt.Sprintf("%s lacks the required labels: %s", in.Request.Object.Metadata.Name, strings.Join(missing, ", ")), 0)
	}
	return wasi.Accept()
}
