package wasmbin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// TestCheckLimitsHostile: each hostile module of issue 30 is refused by the
// limit it exceeds, with the function and the limit in the message, in
// well under a second (the module is read, nothing is allocated for what it
// claims).
func TestCheckLimitsHostile(t *testing.T) {
	cases := []struct {
		name   string
		module []byte
		limit  string
		want   string
	}{
		{"locals 4e9", hostile.Locals(4_000_000_000), "locals", "function 1 declares 4000000000 locals; the limit is 50000"},
		{"locals 1e8", hostile.Locals(100_000_000), "locals", "function 1 declares 100000000 locals; the limit is 50000"},
		{"locals spread 1e9", hostile.LocalsSpread(1000, 1_000_000), "locals", "function 1 declares 1000000000 locals; the limit is 50000"},
		{"nested blocks 50k", hostile.NestedBlocks(50_000), "nesting depth", "function 1 nests blocks 50000 deep; the limit is 10000"},
		{"nested ifs 1e6", hostile.NestedIfs(1_000_000), "nesting depth", "function 1 nests blocks 1000000 deep; the limit is 10000"},
		{"functions 1.1e6", hostile.Functions(1_100_000), "functions", "the module declares 1100002 functions; the limit is 1000000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			err := CheckLimits(c.module, Limits{})
			took := time.Since(start)
			if !errors.Is(err, ErrLimit) {
				t.Fatalf("CheckLimits = %v, want ErrLimit", err)
			}
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != c.limit {
				t.Fatalf("CheckLimits = %#v, want a LimitError on %q", err, c.limit)
			}
			if err.Error() != c.want {
				t.Fatalf("message %q, want %q", err, c.want)
			}
			if took > 5*time.Second {
				t.Fatalf("CheckLimits took %s", took)
			}
		})
	}
}

// TestCheckLimitsConfigured: a limit raised lets the module through, one
// lowered refuses a module the defaults accept.
func TestCheckLimitsConfigured(t *testing.T) {
	deep := hostile.NestedBlocks(30_000)
	if err := CheckLimits(deep, Limits{Nesting: 30_000}); err != nil {
		t.Fatalf("nesting 30000 with the limit at 30000: %v", err)
	}
	if err := CheckLimits(hostile.Locals(1000), Limits{Locals: 999}); !errors.Is(err, ErrLimit) {
		t.Fatalf("1000 locals with the limit at 999: %v", err)
	}
	m := hostile.Minimal()
	err := CheckLimits(m, Limits{ModuleBytes: uint64(len(m) - 1)})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "module size" || !strings.Contains(err.Error(), "the limit is") {
		t.Fatalf("module over ModuleBytes: %v", err)
	}
	if err := CheckLimits(m, Limits{}); err != nil {
		t.Fatalf("minimal module: %v", err)
	}
	big := hostile.Module{Body: append(make([]byte, 2000), 0x0b)}.Bytes() // 2,000 nops
	if err := CheckLimits(big, Limits{BodyBytes: 1000}); !errors.As(err, &le) || le.Limit != "function body size" || le.Index != 1 {
		t.Fatalf("body over BodyBytes: %v", err)
	}
}

// TestMeasureLimits reports the largest of each size.
func TestMeasureLimits(t *testing.T) {
	st, err := MeasureLimits(hostile.Module{Locals: []hostile.LocalDecl{{Count: 7, Type: hostile.ValI32}, {Count: 5, Type: hostile.ValI64}}, ExtraFuncs: 3}.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if st.Locals != 12 || st.LocalsFunc != 1 || st.Functions != 5 || st.Types != 2 || st.Exports != 2 || st.Params != 2 {
		t.Fatalf("stats %+v", st)
	}
	st, err = MeasureLimits(hostile.NestedIfs(77))
	if err != nil || st.Nesting != 77 || st.NestingFunc != 1 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

// TestInstrumentMovesStart: Instrument removes the start section and
// exports its function as StartExport (the host runs it interruptible);
// a module without one gets no such export; a module that exports the
// name already is refused.
func TestInstrumentMovesStart(t *testing.T) {
	out, _, err := Instrument(hostile.StartLoop())
	if err != nil {
		t.Fatal(err)
	}
	secs, err := Sections(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secs {
		if s.ID == sectionStart {
			t.Fatal("the instrumented module still has a start section")
		}
	}
	exps, _ := Exports(out)
	if !HasFuncExport(exps, StartExport) {
		t.Fatalf("exports %v, want %s", exps, StartExport)
	}
	out, _, err = Instrument(hostile.Minimal())
	if err != nil {
		t.Fatal(err)
	}
	if exps, _ := Exports(out); HasFuncExport(exps, StartExport) {
		t.Fatalf("a module without a start function exports %s", StartExport)
	}
	if _, _, err := Instrument(hostile.Module{ExportAs: StartExport}.Bytes()); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a module exporting %s: %v, want ErrUnsupported", StartExport, err)
	}
}

// TestCheckLimitsTables: the initial size of an imported table (named by its
// import index) and of a defined one, with or without an initializer, is
// checked against Limits.TableEntries; the same import section tells
// Proposals how many memories the module imports.
func TestCheckLimitsTables(t *testing.T) {
	imports := sec(2, 3,
		1, 'm', 1, 'f', 0, 0, // func, type 0
		1, 'm', 1, 'g', 3, 0x7f, 0, // global i32
		1, 'm', 1, 't', 1, 0x70, 0, 11) // table funcref, min 11
	cases := []struct {
		name string
		mod  []byte
		want string
	}{
		{"imported", mod(sec(1, 1, 0x60, 0, 0), imports), "table 2 starts with 11 entries; the limit is 10"},
		{"defined", mod(sec(4, 2, 0x70, 0, 1, 0x70, 1, 11, 12)), "table 1 starts with 11 entries; the limit is 10"},
		{"initialized", mod(sec(4, 1, 0x40, 0x00, 0x70, 0, 11, 0xd0, 0x70, 0x0b)), "table 0 starts with 11 entries; the limit is 10"},
	}
	for _, c := range cases {
		if err := CheckLimits(c.mod, Limits{TableEntries: 10}); err == nil || err.Error() != c.want {
			t.Errorf("%s: CheckLimits = %v, want %q", c.name, err, c.want)
		}
		if err := CheckLimits(c.mod, Limits{TableEntries: 11}); err != nil {
			t.Errorf("%s: CheckLimits at the limit = %v", c.name, err)
		}
	}
	st, err := MeasureLimits(mod(sec(1, 1, 0x60, 0, 0), imports, sec(6, 1, 0x7f, 0, 0x41, 0, 0x0b)))
	if err != nil || st.Imports != 3 || st.Globals != 2 || st.TableEntries != 11 {
		t.Errorf("MeasureLimits = %+v, %v; want 3 imports, 2 globals, 11 table entries", st, err)
	}
	memImport := sec(2, 1, 1, 'm', 1, 'm', 2, 0, 1)
	if p, err := Proposals(mod(memImport, sec(5, 1, 0, 1))); err != nil || p&ProposalMultiMemory == 0 {
		t.Errorf("Proposals(one imported and one defined memory) = %v, %v; want multi-memory", p, err)
	}
}

// TestInitialMemory: the initial size of a module's first memory, imported
// or defined, in bytes; none for a module without memory.
func TestInitialMemory(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  []byte
		want uint64
		ok   bool
	}{
		{"defined", mod(sec(5, 1, 1, 3, 10)), 3 << 16, true},
		{"imported", mod(sec(2, 1, 3, 'e', 'n', 'v', 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0, 5)), 5 << 16, true},
		{"none", mod(sec(1, 1, 0x60, 0, 0)), 0, false},
	} {
		got, ok, err := InitialMemory(c.mod)
		if err != nil || got != c.want || ok != c.ok {
			t.Errorf("%s: InitialMemory = %d, %v, %v; want %d, %v", c.name, got, ok, err, c.want, c.ok)
		}
	}
}
