// Command cel is a TinyGo probe (see package tinygoprobe): cel-go compiling
// and evaluating an expression over a dynamic object, as a MAP mutation's
// expression reads Object and object, and an evaluation cancelled by its cost
// limit, as the apiserver limits every expression (cel-go cancels it with a
// panic it recovers, which TinyGo cannot do on WebAssembly: patch costlimit).
package main

import (
	"errors"
	"fmt"
	"os"

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
	fmt.Println("ok", out.Value(), "cost-limit", cost)
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
