// Command wapc-required-labels is examples/wasi-required-labels built as a
// standard-Go waPC reactor (sdk/guest) instead of a WASI command: the same
// settings, decisions and answers, so that docs/benchmarks.md can compare
// the two execution modes on the same work. Keep the code below the
// registration identical to the example's.
package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/wasi"
)

func init() {
	guest.RegisterFunctions(map[string]guest.Function{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}

// main stays empty: the module is a reactor, the host calls __guest_call.
func main() {}

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
