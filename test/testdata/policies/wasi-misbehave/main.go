// Command wasi-misbehave is a test fixture in the WASI execution mode: its
// settings' "behaviour" picks what validate does, to exercise the host's
// handling of every way a WASI command can end. validate-settings rejects
// {"behaviour":"invalid"} and exits 3 on {"behaviour":"settings-exit"}.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/sdk/wasi"
)

func main() {
	wasi.Main(wasi.Policy{Validate: validate, ValidateSettings: validateSettings})
}

func validateSettings(b []byte) ([]byte, error) {
	var s struct{ Behaviour string }
	_ = json.Unmarshal(b, &s)
	switch s.Behaviour {
	case "invalid":
		return wasi.SettingsInvalid("behaviour invalid is refused")
	case "settings-exit":
		log.Fatal("settings exploded")
	}
	return wasi.SettingsValid()
}

var sink [][]byte

func validate(payload []byte) ([]byte, error) {
	var in struct {
		Request  json.RawMessage `json:"request"`
		Settings struct {
			Behaviour string  `json:"behaviour"`
			Binding   string  `json:"binding"`
			Seconds   float64 `json:"seconds"`
		} `json:"settings"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, err
	}
	switch in.Settings.Behaviour {
	case "accept", "":
		return wasi.Accept()
	case "reject":
		return wasi.Reject("rejected by behaviour", 403)
	case "echo":
		// the whole stdin document as the message
		return wasi.Reject(string(payload), 0)
	case "mutate":
		var obj map[string]any
		var r struct {
			Object map[string]any `json:"object"`
		}
		_ = json.Unmarshal(in.Request, &r)
		obj = r.Object
		md, _ := obj["metadata"].(map[string]any)
		if md != nil {
			md["labels"] = map[string]any{"mutated": "yes"}
		}
		return wasi.Mutate(obj)
	case "fatal":
		log.Fatal("something went badly wrong")
	case "exit":
		fmt.Fprint(os.Stderr, "  exiting with 7  \n")
		os.Exit(7)
	case "panic":
		var m map[string]int
		m["x"] = 1
	case "sleep":
		// sleeps 20 s (settings "seconds" for another length), then accepts
		d := 20 * time.Second
		if in.Settings.Seconds > 0 {
			d = time.Duration(in.Settings.Seconds * float64(time.Second))
		}
		time.Sleep(d)
		return wasi.Accept()
	case "loop":
		for i := 0; ; i++ {
			if i < 0 {
				break
			}
		}
	case "alloc":
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	case "big":
		return []byte(`{"accepted":true,"message":"` + strings.Repeat("x", 20<<20) + `"}`), nil
	case "garbage":
		return []byte("this is not JSON"), nil
	case "nothing":
		return nil, nil
	case "stdin-again":
		// reads stdin after its end: EOF, not a hang
		rest, _ := io.ReadAll(os.Stdin)
		return wasi.Reject(fmt.Sprintf("read %d more bytes", len(rest)), 0)
	case "hostcall":
		answer, err := wasi.HostCall(in.Settings.Binding, "ns", "op", []byte(`{"q":1}`))
		if err != nil {
			return wasi.Reject("host error: "+err.Error(), 0)
		}
		return wasi.Reject("host answer: "+string(answer), 0)
	}
	return nil, fmt.Errorf("unknown behaviour %q", in.Settings.Behaviour)
}
