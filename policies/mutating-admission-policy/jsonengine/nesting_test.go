package jsonengine

import (
	"strings"
	"testing"

	apiservercel "k8s.io/apiserver/pkg/cel"
)

// TestBracketDepthAgainstCEL: compileExpression's refusal of deep brackets is cel-go's, at the same
// depth (natively, where cel-go's parser recovers its panic): an expression
// nested 250 deep in any bracket is refused by both with the same message,
// one nested 249 deep is compiled by both; brackets in literals and comments
// do not count.
func TestBracketDepthAgainstCEL(t *testing.T) {
	env, _, err := newEnv(false, apiservercel.NewObjectType("kubernetes.variables", map[string]*apiservercel.DeclField{}))
	if err != nil {
		t.Fatal(err)
	}
	nest := func(open, close string, n int) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	for _, c := range []struct {
		name, expr string
		depth      int
	}{
		{"parens 249", nest("(", ")", 249), 249},
		{"parens 250", nest("(", ")", 250), 250},
		{"lists 249", nest("[", "]", 249), 249},
		{"lists 250", nest("[", "]", 250), 250},
		{"maps 250", nest("{1: ", "}", 250), 250},
		{"calls 250", nest("int(", ")", 250), 250},
		{"mixed 300", nest("[(", ")]", 150), 300},
		{"literals", `"((((" + '[[' + """{{{""" + r'\(' + "\"(" // (((`, 0},
		{"literal closes", `'\'' + (1 == 1 ? "a" : "b")`, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := bracketDepth(c.expr); got != c.depth {
				t.Fatalf("bracketDepth = %d, want %d", got, c.depth)
			}
			_, iss := env.Compile(c.expr)
			celRefuses := iss != nil && strings.Contains(iss.String(), "recursion limit exceeded")
			if celRefuses != (c.depth >= maxRecursionDepth) {
				t.Fatalf("cel-go refuses: %v (%v), bracket depth %d", celRefuses, iss, c.depth)
			}
			got := compileExpression(env, c.expr)
			if celRefuses {
				want := "compilation failed: " + iss.String()
				if got.err == nil || got.err.Error() != want {
					t.Fatalf("got %v, want %q", got.err, want)
				}
			} else if got.err != nil && strings.Contains(got.err.Error(), "recursion") {
				t.Fatalf("refused: %v", got.err)
			}
		})
	}
}
