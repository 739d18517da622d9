package opa_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/tollgate-dev/tollgate/host/opa"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const (
	gatekeeperExample = "examples/gatekeeper-allowed-registries"
	opaExample        = "examples/opa-required-labels"
	misbehave         = "test/testdata/policies/opa-misbehave"
	builtinsFixture   = "test/testdata/policies/opa-builtins"
	missingBuiltin    = "test/testdata/policies/opa-missing-builtin"
)

// cache is shared by the package's tests: each module is compiled once.
var cache = wazero.NewCompilationCache()

func compileCode(t testing.TB, code []byte, cfg opa.Config) *opa.Module {
	t.Helper()
	m, err := opa.Compile(context.Background(), cache, code, cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func compile(t testing.TB, dir string, cfg opa.Config) *opa.Module {
	t.Helper()
	return compileCode(t, testfixture.Module(t, dir), cfg)
}

func eval(t testing.TB, m *opa.Module, input string) string {
	t.Helper()
	out, err := m.Eval(context.Background(), 2*time.Second, []byte(input), nil)
	if err != nil {
		t.Fatalf("Eval: %v", err)
	}
	return string(out)
}

func TestGatekeeperExample(t *testing.T) {
	m := compile(t, gatekeeperExample, opa.Config{})
	if maj, min := m.ABIVersion(); maj != 1 || min != 3 || !m.FastPath() {
		t.Fatalf("ABI %d.%d fast path %v, want 1.3 with opa_eval", maj, min, m.FastPath())
	}
	if got := m.Entrypoints(); len(got) != 1 || got["policy/violation"] != 0 {
		t.Fatalf("entrypoints %v", got)
	}
	for _, tc := range []struct {
		name, pod, want string
	}{
		{"allowed", "pod-allowed.json", `[{"result":[]}]`},
		{"disallowed", "pod-disallowed.json", `"msg":"container app: image docker.io/library/nginx:latest uses the tag latest"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testfixture.File(t, gatekeeperExample+"/testdata/"+tc.pod)
			input := `{"parameters":{"registries":["registry.example.com/"]},"review":` + string(pod) + `}`
			for range 3 { // one instance, its heap reset between evaluations
				if out := eval(t, m, input); !strings.Contains(out, tc.want) {
					t.Fatalf("got %s, want %s", out, tc.want)
				}
			}
		})
	}
	if m.Live() != 1 {
		t.Fatalf("%d instances, want 1 reused", m.Live())
	}
}

// TestHeapReset: thousands of evaluations on one instance leave its memory
// where the first left it.
func TestHeapReset(t *testing.T) {
	m := compile(t, opaExample, opa.Config{Data: []byte(`{"labels":["team","owner"]}`)})
	input := `{"request":` + string(testfixture.File(t, opaExample+"/testdata/pod-missing-owner.json")) + `}`
	first := eval(t, m, input)
	for range 2000 {
		if out := eval(t, m, input); out != first {
			t.Fatalf("evaluation changed: %s, then %s", first, out)
		}
	}
	if m.Live() != 1 {
		t.Fatalf("%d instances", m.Live())
	}
}

func TestOPAExampleData(t *testing.T) {
	for _, tc := range []struct {
		name, data, pod, want string
	}{
		{"missing label", `{"labels":["team","owner"]}`, "pod-missing-owner.json", `Pod shop/bad: mandatory label \"owner\" is missing`},
		{"labelled", `{"labels":["team","owner"]}`, "pod-labelled.json", `"allowed":true`},
		{"no settings", ``, "pod-missing-owner.json", `"allowed":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := compile(t, opaExample, opa.Config{Data: []byte(tc.data)})
			pod := testfixture.File(t, opaExample+"/testdata/"+tc.pod)
			if out := eval(t, m, `{"request":`+string(pod)+`}`); !strings.Contains(out, tc.want) {
				t.Fatalf("got %s, want %s", out, tc.want)
			}
		})
	}
}

// TestDataPerEvaluation: a data document given to Eval replaces the loaded
// one for that evaluation only.
func TestDataPerEvaluation(t *testing.T) {
	m := compile(t, opaExample, opa.Config{Data: []byte(`{"labels":["owner"]}`)})
	input := []byte(`{"request":` + string(testfixture.File(t, opaExample+"/testdata/pod-missing-owner.json")) + `}`)
	team, owner := opa.NewData([]byte(`{"labels":["team"]}`)), opa.NewData([]byte(`{"labels":["team","owner"]}`))
	for range 3 {
		// The same Data twice (parsed once, reused), another Data, none.
		for _, d := range []*opa.Data{team, team, owner, nil, team} {
			out, err := m.Eval(context.Background(), time.Second, input, d)
			want := `"allowed":false` // the loaded data and owner require the missing label
			if d == team {
				want = `"allowed":true`
			}
			if err != nil || !strings.Contains(string(out), want) {
				t.Fatalf("with data %v: %s, %v; want %s", d, out, err, want)
			}
		}
	}
	// A document the module's parser refuses is an error of that evaluation.
	if _, err := m.Eval(context.Background(), time.Second, input, opa.NewData([]byte(`{"labels":`))); !errors.Is(err, opa.ErrBadData) {
		t.Fatalf("bad data: %v, want ErrBadData", err)
	}
	if out := eval(t, m, string(input)); !strings.Contains(out, `"allowed":false`) {
		t.Fatalf("after bad data: %s", out)
	}
}

func TestBuiltins(t *testing.T) {
	m := compile(t, builtinsFixture, opa.Config{})
	out := eval(t, m, `{"n": 3.0, "f": 2}`)
	var res []struct{ Result map[string]json.RawMessage }
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 {
		t.Fatalf("%s: %v", out, err)
	}
	got := res[0].Result
	want := map[string]string{
		"sprintf":                `"3 items, 2, x"`,
		"time_now_ns":            `true`,
		"base64url":              `"aGVsbG8_"`,
		"urlquery_encode":        `"a+b%26c"`,
		"urlquery_decode":        `"a b\u0026c"`,
		"urlquery_encode_object": `"a=1\u0026b=2\u0026b=3"`,
		"urlquery_decode_object": `{"a":["1"],"b":["2","3"]}`,
		"json_is_valid":          `[true,false]`,
		"json_patch":             `{"a":1,"b":2}`,
		"yaml_marshal":           `"a:\n- 1\n- 2\n"`,
		"yaml_unmarshal":         `{"a":[1,2]}`,
		"yaml_is_valid":          `false`,
		"hex_encode":             `"6869"`,
		"hex_decode":             `"hi"`,
		"glob_quote_meta":        `"\\*.example.com"`,
		"regex_split":            `["a","b","c"]`,
		"regex_template_match":   `true`,
		"regex_find_n":           `["1","22"]`,
		"semver_is_valid":        `[true,false]`,
		"semver_compare":         `-1`,
		"trace":                  `true`,
	}
	for k, w := range want {
		var a, b any
		_ = json.Unmarshal(got[k], &a)
		_ = json.Unmarshal([]byte(w), &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Errorf("%s = %s, want %s", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d results, want %d: %s", len(got), len(want), out)
	}
	// Kubewarden's sprintf converts numbers to integers: a fraction fails the evaluation.
	_, err := m.Eval(context.Background(), time.Second, []byte(`{"n": 1.5, "f": 2}`), nil)
	if !errors.Is(err, wasm.ErrTrap) || !strings.Contains(err.Error(), "sprintf: argument 0 is 1.5, not an integer") {
		t.Fatalf("sprintf of 1.5: %v", err)
	}
	if out2 := eval(t, m, `{"n": 3, "f": 2.0}`); !strings.Contains(out2, `3 items, 2, x`) {
		t.Fatalf("after a failed evaluation: %s", out2)
	}
}

func TestMissingBuiltinsRefused(t *testing.T) {
	_, err := opa.Compile(context.Background(), cache, testfixture.Module(t, missingBuiltin), opa.Config{})
	if !errors.Is(err, opa.ErrMissingBuiltins) {
		t.Fatalf("err = %v, want ErrMissingBuiltins", err)
	}
	if !strings.Contains(err.Error(), `["net.lookup_ip_addr" "time.date" "time.parse_rfc3339_ns"]`) {
		t.Fatalf("err = %v, want the three builtins listed", err)
	}
}

func TestMisbehave(t *testing.T) {
	allowed := func(name string) string {
		return `{"request":{"uid":"u","object":{"metadata":{"name":"` + name + `"}}}}`
	}
	t.Run("answer", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{})
		if out := eval(t, m, allowed("bad")); !strings.Contains(out, `"allowed":false`) {
			t.Fatal(out)
		}
	})
	t.Run("undefined", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{Data: []byte(`{"behaviour":"none"}`)})
		if out := eval(t, m, allowed("x")); out != `[]` {
			t.Fatalf("got %s, want []", out)
		}
	})
	t.Run("abort", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{Data: []byte(`{"behaviour":"conflict"}`)})
		_, err := m.Eval(context.Background(), time.Second, []byte(allowed("x")), nil)
		if !errors.Is(err, wasm.ErrTrap) || !strings.Contains(err.Error(), "opa_abort") || !strings.Contains(err.Error(), "conflict") {
			t.Fatalf("err = %v, want a trap with opa_abort's message", err)
		}
		if m.Live() != 0 {
			t.Fatalf("the aborted instance was kept (%d live)", m.Live())
		}
		// A fresh instance takes its place.
		if _, err := m.Eval(context.Background(), time.Second, []byte(allowed("x")), nil); !errors.Is(err, wasm.ErrTrap) {
			t.Fatalf("second evaluation: %v", err)
		}
	})
	t.Run("endless", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{Data: []byte(`{"behaviour":"endless"}`)})
		if !m.Interruptible() {
			t.Fatal("the module was not instrumented")
		}
		start := time.Now()
		_, err := m.Eval(context.Background(), 200*time.Millisecond, []byte(allowed("x")), nil)
		if !errors.Is(err, wasm.ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("stopped after %s", d)
		}
	})
	t.Run("endless uninstrumented", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{Data: []byte(`{"behaviour":"endless"}`), DisableInstrumentation: true})
		_, err := m.Eval(context.Background(), 200*time.Millisecond, []byte(allowed("x")), nil)
		if !errors.Is(err, wasm.ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
	})
	t.Run("oversized output", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{Data: []byte(`{"behaviour":"big"}`), MaxOutputBytes: 1 << 20})
		_, err := m.Eval(context.Background(), 5*time.Second, []byte(allowed("x")), nil)
		if !errors.Is(err, opa.ErrOutputLimit) {
			t.Fatalf("err = %v, want ErrOutputLimit", err)
		}
	})
	t.Run("memory limit", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{Data: []byte(`{"behaviour":"big"}`), MemoryLimitBytes: 4 << 20})
		_, err := m.Eval(context.Background(), 5*time.Second, []byte(allowed("x")), nil)
		if !errors.Is(err, wasm.ErrMemoryLimit) {
			t.Fatalf("err = %v, want ErrMemoryLimit", err)
		}
	})
	t.Run("input not JSON", func(t *testing.T) {
		m := compile(t, misbehave, opa.Config{})
		// The host sends JSON; the module's parser treats anything else as
		// no input, and the instance stays usable.
		out, err := m.Eval(context.Background(), time.Second, []byte(`{"request":`), nil)
		t.Logf("%s, %v", out, err)
		if out := eval(t, m, allowed("x")); !strings.Contains(out, `"allowed":true`) {
			t.Fatalf("after bad input: %s", out)
		}
	})
	t.Run("data not JSON", func(t *testing.T) {
		_, err := opa.Compile(context.Background(), cache, testfixture.Module(t, misbehave), opa.Config{Data: []byte(`{"a":`)})
		if !errors.Is(err, opa.ErrBadData) {
			t.Fatalf("err = %v, want ErrBadData", err)
		}
	})
}

// TestConcurrent: a pool of two instances under four goroutines.
func TestConcurrent(t *testing.T) {
	m := compile(t, gatekeeperExample, opa.Config{PoolSize: 2})
	input := `{"parameters":{"registries":["registry.example.com/"]},"review":` + string(testfixture.File(t, gatekeeperExample+"/testdata/pod-disallowed.json")) + `}`
	want := eval(t, m, input)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 50 {
				out, err := m.Eval(context.Background(), 5*time.Second, []byte(input), nil)
				if err == nil && string(out) != want {
					err = errors.New("different result: " + string(out))
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if live := m.Live(); live > 2 {
		t.Fatalf("%d instances, pool of 2", live)
	}
}

// setGlobal returns code with the i32 global exported as name initialised to v.
func setGlobal(t testing.TB, code []byte, name string, v byte) []byte {
	t.Helper()
	secs, err := wasmbin.Sections(code)
	if err != nil {
		t.Fatal(err)
	}
	index := -1
	for _, s := range secs {
		if s.ID != 7 {
			continue
		}
		p := s.Payload
		n, k := uleb(p)
		p = p[k:]
		for range n {
			l, k := uleb(p)
			nm := string(p[k : k+int(l)])
			p = p[k+int(l):]
			kind := p[0]
			idx, k := uleb(p[1:])
			p = p[1+k:]
			if kind == 3 && nm == name {
				index = int(idx)
			}
		}
	}
	for _, s := range secs {
		if s.ID != 6 || index < 0 {
			continue
		}
		p := s.Payload
		_, k := uleb(p)
		off := s.End - len(p) + k
		for i := 0; ; i++ {
			// valtype, mut, init expr (i32.const N end for these globals)
			expr := off + 2
			if i == index {
				if code[expr] != 0x41 {
					t.Fatalf("global %s is not initialised by i32.const", name)
				}
				out := bytes.Clone(code)
				out[expr+1] = v
				return out
			}
			e := bytes.IndexByte(code[expr:], 0x0b)
			off = expr + e + 1
		}
	}
	t.Fatalf("no global %s", name)
	return nil
}

func uleb(p []byte) (uint64, int) {
	var v uint64
	for i := range p {
		v |= uint64(p[i]&0x7f) << (7 * i)
		if p[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

func TestABIVersion(t *testing.T) {
	code := testfixture.Module(t, gatekeeperExample)
	_, err := opa.Compile(context.Background(), cache, setGlobal(t, code, "opa_wasm_abi_version", 2), opa.Config{})
	if !errors.Is(err, opa.ErrABIVersion) || !strings.Contains(err.Error(), "ABI 2.3") {
		t.Fatalf("err = %v, want ErrABIVersion naming 2.3", err)
	}
	// ABI 1.1 has no opa_eval: the eval-context calls give the same results.
	m := compileCode(t, setGlobal(t, code, "opa_wasm_abi_minor_version", 1), opa.Config{})
	if m.FastPath() {
		t.Fatal("fast path on ABI 1.1")
	}
	fast := compile(t, gatekeeperExample, opa.Config{})
	for _, pod := range []string{"pod-allowed.json", "pod-disallowed.json"} {
		input := `{"parameters":{"registries":["registry.example.com/"]},"review":` + string(testfixture.File(t, gatekeeperExample+"/testdata/"+pod)) + `}`
		for range 3 {
			if a, b := eval(t, m, input), eval(t, fast, input); a != b {
				t.Fatalf("%s: ctx calls %s, opa_eval %s", pod, a, b)
			}
		}
	}
}

func TestNotOPA(t *testing.T) {
	for name, code := range map[string][]byte{
		"garbage": []byte("not wasm"),
		"waPC":    testfixture.Module(t, "examples/required-labels"),
	} {
		if _, err := opa.Compile(context.Background(), cache, code, opa.Config{}); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
}
