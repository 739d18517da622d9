// Command cel is a TinyGo probe (see package tinygoprobe): cel-go compiling
// and evaluating an expression over a dynamic object, as a MAP mutation's
// expression reads Object and object, an evaluation cancelled by its cost
// limit, as the apiserver limits every expression (cel-go cancels it with a
// panic it recovers, which TinyGo cannot do on WebAssembly: patch costlimit),
// and expressions its parser stops at a limit (the same: patch parserabort).
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/interpreter"
)

func main() {
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		fail("NewEnv", err)
	}
	ast, iss := env.Compile(`object.metadata.labels.exists(k, k == "app") ? "has app" : "no app"`)
	if iss.Err() != nil {
		fail("Compile", iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		fail("Program", err)
	}
	out, _, err := prg.Eval(map[string]any{"object": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}}}})
	if err != nil {
		fail("Eval", err)
	}
	cost := costLimit(env)
	limits := parserLimits(env)
	fmt.Println("ok", out.Value(), "cost-limit", cost, "parser-limits", limits)
}

// parserLimits compiles expressions cel-go's parser stops at one of its
// limits (reporting syntax errors, recovering from them, looking ahead while
// recovering, the depth of a rule while parsing and of the tree while
// building the AST), which cel-go does with a panic it recovers in the
// parser: each must be refused with the issues cel-go gives natively (their
// number and the one that names the limit), not trap. It returns how many
// were.
func parserLimits(env *cel.Env) int {
	cases := []struct {
		name, expr, want string
		issues           int
	}{
		// The 101st syntax error stops the parser; cel-go reports 100.
		{"syntax errors", strings.Repeat("#", 150) + "1", "token recognition error at: '#'", 100},
		{"error recoveries", strings.Repeat("(1 1) + ", 40) + "1", "error recovery attempt limit exceeded: 30", 31},
		{"lookahead while recovering", "1 + ) " + strings.Repeat("a ", 300), "error recovery token lookahead limit exceeded: 256", 3},
		{"rule depth while parsing", strings.Repeat("true ? 1 : ", 300) + "1", "expression recursion limit exceeded: 250", 1},
		{"brackets while parsing", strings.Repeat("[", 300) + strings.Repeat("]", 300), "expression recursion limit exceeded: 250", 1},
		{"tree depth while building", "a" + strings.Repeat(".b", 300), "max recursion depth exceeded", 1},
		{"operators while building", strings.Repeat("1 + ", 300) + "1", "max recursion depth exceeded", 1},
	}
	for _, c := range cases {
		_, iss := env.Compile(c.expr)
		if iss.Err() == nil {
			fail("Compile ("+c.name+")", errors.New("no error"))
		}
		if msg := iss.String(); !strings.Contains(msg, c.want) || len(iss.Errors()) != c.issues {
			fail("Compile ("+c.name+")", fmt.Errorf("%d issues %.300q, want %d with %q", len(iss.Errors()), msg, c.issues, c.want))
		}
	}
	return len(cases)
}

// costLimit evaluates nested comprehensions (10^4 products) with a cost limit
// of 1,000 and checks that the evaluation is cancelled as cel-go documents:
// no value, an EvalCancelledError, the cost that crossed the limit. The same
// program with a limit it stays under gives the value.
func costLimit(env *cel.Env) uint64 {
	const expr = `[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, a*b*c*d)))).size()`
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		fail("Compile", iss.Err())
	}
	eval := func(limit uint64) (any, uint64, error) {
		prg, err := env.Program(ast, cel.EvalOptions(cel.OptTrackCost), cel.CostLimit(limit))
		if err != nil {
			fail("Program", err)
		}
		out, det, err := prg.Eval(map[string]any{})
		if det == nil || det.ActualCost() == nil {
			fail("Eval", errors.New("no evaluation details"))
		}
		var v any
		if out != nil {
			v = out.Value()
		}
		return v, *det.ActualCost(), err
	}
	out, cost, err := eval(1000)
	var cancelled interpreter.EvalCancelledError
	if !errors.As(err, &cancelled) || cancelled.Cause != interpreter.CostLimitExceeded ||
		err.Error() != "operation cancelled: actual cost limit exceeded" {
		fail("Eval over the cost limit", fmt.Errorf("error %v (%T), want the cost limit's EvalCancelledError", err, err))
	}
	if out != nil || cost <= 1000 || cost > 1100 {
		fail("Eval over the cost limit", fmt.Errorf("value %v and cost %d, want none and the cost that crossed 1000", out, cost))
	}
	out, all, err := eval(1 << 40)
	if err != nil || out != int64(10) || all <= cost {
		fail("Eval under the cost limit", fmt.Errorf("value %v, cost %d, error %v; want 10", out, all, err))
	}
	return cost
}

func fail(step string, err error) {
	fmt.Println("FAIL", step+":", err)
	os.Exit(1)
}
