package group

import (
	"errors"
	"strings"
	"testing"
)

func TestParseEval(t *testing.T) {
	tests := []struct {
		expr    string
		values  map[string]bool
		want    bool
		called  string // members called, in order
		printed string
	}{
		{"a()", map[string]bool{"a": true}, true, "a", "a()"},
		{"!a()", map[string]bool{"a": true}, false, "a", "!a()"},
		{"a() && b()", map[string]bool{"a": false, "b": true}, false, "a", "(a() && b())"},
		{"a() && b()", map[string]bool{"a": true, "b": true}, true, "ab", "(a() && b())"},
		{"a() || b()", map[string]bool{"a": true, "b": false}, true, "a", "(a() || b())"},
		{"a() || b()", map[string]bool{"a": false, "b": false}, false, "ab", "(a() || b())"},
		{"a() && (b() || !c())", map[string]bool{"a": true, "b": false, "c": false}, true, "abc", "(a() && (b() || !c()))"},
		{"a() && (b() || !c())", map[string]bool{"a": true, "b": true, "c": false}, true, "ab", "(a() && (b() || !c()))"},
		{"a() || b() && c()", map[string]bool{"a": false, "b": true, "c": false}, false, "abc", "(a() || (b() && c()))"},
		{"a() && a() && !!a()", map[string]bool{"a": true}, true, "a", "((a() && a()) && !!a())"},
		{" true || x() ", nil, true, "", "(true || x())"},
		{"false && x()", nil, false, "", "(false && x())"},
		{"is_ok_2()", map[string]bool{"is_ok_2": true}, true, "is_ok_2", "is_ok_2()"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			e, err := Parse(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.String(); got != tt.printed {
				t.Errorf("String() = %q, want %q", got, tt.printed)
			}
			var called strings.Builder
			got, err := Eval(e, func(name string) (bool, error) {
				called.WriteString(name)
				v, ok := tt.values[name]
				if !ok {
					t.Fatalf("unexpected call %s", name)
				}
				return v, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Eval = %v, want %v", got, tt.want)
			}
			if called.String() != tt.called {
				t.Errorf("called %q, want %q", called.String(), tt.called)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ expr, wantMsg string }{
		{"", "empty expression"},
		{"a", `expected '(' after "a"`},
		{"a(", "expected ')'"},
		{"a(x)", "take no arguments"},
		{"a() &", `expected "&&"`},
		{"a() && ", "unexpected end of expression"},
		{"(a()", "expected ')'"},
		{"a() b()", "unexpected name"},
		{"a() == b()", "unexpected character '='"},
		{strings.Repeat("!", 100) + "a()", "nested deeper"},
		{strings.Repeat("(", 100) + "a()" + strings.Repeat(")", 100), "nested deeper"},
		{strings.Repeat("a() || ", 1000) + "a()", "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			_, err := Parse(tt.expr)
			if err == nil || !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Parse(%q) error = %v, want ErrSyntax containing %q", tt.expr, err, tt.wantMsg)
			}
		})
	}
}

func TestEvalError(t *testing.T) {
	e, _ := Parse("a() || b() || c()")
	boom := errors.New("boom")
	var calls []string
	_, err := Eval(e, func(n string) (bool, error) {
		calls = append(calls, n)
		if n == "b" {
			return false, boom
		}
		return false, nil
	})
	if !errors.Is(err, boom) || strings.Join(calls, "") != "ab" {
		t.Fatalf("err=%v calls=%v, want boom after a,b", err, calls)
	}
}

func TestCalls(t *testing.T) {
	e, _ := Parse("b() && (a() || !b()) || c()")
	if got := strings.Join(Calls(e), ","); got != "b,a,c" {
		t.Fatalf("Calls = %s", got)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"a()", "a() && (b() || !c())", "!(x() || true)", "((", "a() &&& b()", "true"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error not ErrSyntax: %v", err)
			}
			return
		}
		// Printing and re-parsing gives the same tree.
		e2, err := Parse(e.String())
		if err != nil {
			// a deep tree printed with parentheses may exceed the depth limit
			if strings.Contains(err.Error(), "nested deeper") || strings.Contains(err.Error(), "longer than") {
				return
			}
			t.Fatalf("reparse %q: %v", e.String(), err)
		}
		if e2.String() != e.String() {
			t.Fatalf("round trip %q -> %q", e.String(), e2.String())
		}
		// Each member is evaluated at most once.
		count := map[string]int{}
		if _, err := Eval(e, func(n string) (bool, error) { count[n]++; return len(n)%2 == 0, nil }); err != nil {
			t.Fatal(err)
		}
		for n, c := range count {
			if c > 1 {
				t.Fatalf("member %s evaluated %d times", n, c)
			}
		}
	})
}

func BenchmarkEval(b *testing.B) {
	e, _ := Parse("a() && (b() || !c()) && d()")
	f := func(n string) (bool, error) { return n != "b", nil }
	for b.Loop() {
		_, _ = Eval(e, f)
	}
}
