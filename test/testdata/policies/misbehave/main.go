// Command misbehave is a test fixture: a waPC policy that misbehaves on demand, so that the host's
// limits and error handling can be tested against a real TinyGo module. The behaviour of
// `validate` is chosen by the settings field "behaviour"; see README.md for the list.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	wapc "github.com/wapc/wapc-guest-tinygo"
)

func main() {
	wapc.RegisterFunctions(wapc.Functions{
		"validate":          validate,
		"validate_settings": validateSettings,
		// What policy-sdk-go's protocol package registers; annotate asks for it.
		"protocol_version": func([]byte) ([]byte, error) { return []byte(`"v1"`), nil },
	})
}

// settings selects the behaviour of validate and parameterises some behaviours.
type settings struct {
	Behaviour string `json:"behaviour"`
	// hostcall: the waPC host call to make. Binding defaults to "kubewarden"; Payload is sent
	// as its raw JSON bytes (a JSON string keeps its quotes), nothing when absent.
	Binding   string          `json:"binding"`
	Namespace string          `json:"namespace"`
	Operation string          `json:"operation"`
	Payload   json.RawMessage `json:"payload"`
	// huge-output: the length of the message in bytes (default 50 MiB).
	Size int `json:"size"`
	// mutate-non-object: the mutated_object to return (default the JSON string "not an object").
	MutatedObject json.RawMessage `json:"mutated_object"`
	// oom: the size of each allocation in bytes (default 64 KiB). TinyGo's allocator and
	// collector walk the heap in 16-byte blocks, which costs more per byte for large objects:
	// 64 KiB chunks reach a memory cap fastest (measured).
	Chunk int `json:"chunk"`
	// sleep: how long to sleep, in seconds (default 20).
	Seconds float64 `json:"seconds"`
	// log: the message logged (default "misbehave log").
	Message string `json:"message"`
	// hostcall: how many times to make the call (default 1); the answer of the last one is
	// reported. Measures the marginal cost of a host call (host/capabilities BenchmarkGuestRoundTrip).
	Repeat int `json:"repeat"`
}

// behaviours maps each behaviour to what validate does.
var behaviours = map[string]func(s *settings) ([]byte, error){
	"":                  accept,
	"accept":            accept,
	"trap":              trap,
	"loop":              loop,
	"oom":               oom,
	"invalid-json":      invalidJSON,
	"mutate-non-object": mutateNonObject,
	"huge-output":       hugeOutput,
	"hostcall":          hostcall,
	"log":               logAndAccept,
	"sleep":             sleep,
}

func known() string {
	names := make([]string, 0, len(behaviours))
	for name := range behaviours {
		if name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func parseSettings(raw []byte) (*settings, error) {
	s := &settings{}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if err := json.Unmarshal(trimmed, s); err != nil {
			return nil, fmt.Errorf("settings: %v", err)
		}
	}
	if _, ok := behaviours[s.Behaviour]; !ok {
		return nil, fmt.Errorf("unknown behaviour %q (known: %s)", s.Behaviour, known())
	}
	return s, nil
}

func validateSettings(payload []byte) ([]byte, error) {
	if _, err := parseSettings(payload); err != nil {
		return json.Marshal(map[string]interface{}{"valid": false, "message": err.Error()})
	}
	return []byte(`{"valid":true}`), nil
}

func validate(payload []byte) ([]byte, error) {
	var req struct {
		Settings json.RawMessage `json:"settings"`
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("misbehave: cannot decode the validation request: %v", err)
	}
	s, err := parseSettings(req.Settings)
	if err != nil {
		return nil, fmt.Errorf("misbehave: %v", err)
	}
	return behaviours[s.Behaviour](s)
}

func accept(*settings) ([]byte, error) {
	return []byte(`{"accepted":true}`), nil
}

func trap(*settings) ([]byte, error) {
	panic("misbehave: trap requested")
}

// counter is global so that the loop has an observable effect and is not optimised away.
var counter uint64

func loop(*settings) ([]byte, error) {
	for {
		counter++
	}
}

// hoard keeps every allocation reachable so that the garbage collector cannot free any.
var hoard [][]byte

func oom(s *settings) ([]byte, error) {
	size := s.Chunk
	if size <= 0 {
		size = 64 << 10
	}
	for {
		chunk := make([]byte, size)
		chunk[len(chunk)-1] = byte(len(hoard))
		hoard = append(hoard, chunk)
	}
}

func invalidJSON(*settings) ([]byte, error) {
	return []byte(`this is not JSON {"accepted": true`), nil
}

func mutateNonObject(s *settings) ([]byte, error) {
	mutated := s.MutatedObject
	if len(mutated) == 0 {
		mutated = json.RawMessage(`"not an object"`)
	}
	return json.Marshal(map[string]interface{}{"accepted": true, "mutated_object": mutated})
}

func hugeOutput(s *settings) ([]byte, error) {
	size := s.Size
	if size <= 0 {
		size = 50 << 20
	}
	const prefix, suffix = `{"accepted":false,"code":400,"message":"`, `"}`
	out := make([]byte, len(prefix)+size+len(suffix))
	copy(out, prefix)
	fill := out[len(prefix) : len(prefix)+size]
	for i := range fill {
		fill[i] = 'x'
	}
	copy(out[len(prefix)+size:], suffix)
	return out, nil
}

func hostcall(s *settings) ([]byte, error) {
	binding := s.Binding
	if binding == "" {
		binding = "kubewarden"
	}
	var answer []byte
	var err error
	for i := 0; i < s.Repeat || i == 0; i++ {
		answer, err = wapc.HostCall(binding, s.Namespace, s.Operation, []byte(s.Payload))
	}
	var message string
	if err != nil {
		message = "host call failed: " + err.Error()
	} else {
		message = "host answered: " + string(answer)
	}
	return json.Marshal(map[string]interface{}{"accepted": true, "message": message})
}

func logAndAccept(s *settings) ([]byte, error) {
	message := s.Message
	if message == "" {
		message = "misbehave log"
	}
	line, err := json.Marshal(map[string]interface{}{
		"level":     "info",
		"message":   message,
		"behaviour": "log",
		"answer":    42,
	})
	if err != nil {
		return nil, err
	}
	if _, err := wapc.HostCall("kubewarden", "tracing", "log", line); err != nil {
		return nil, fmt.Errorf("misbehave: logging failed: %v", err)
	}
	return accept(s)
}

// sleep calls time.Sleep, then accepts: under a waPC host a TinyGo sleep ends in WASI poll_oneoff,
// whose clock the host may make a no-op.
func sleep(s *settings) ([]byte, error) {
	d := 20 * time.Second
	if s.Seconds > 0 {
		d = time.Duration(s.Seconds * float64(time.Second))
	}
	time.Sleep(d)
	return []byte(`{"accepted":true,"message":"slept"}`), nil
}
