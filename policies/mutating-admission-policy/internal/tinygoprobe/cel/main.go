// Command cel is a TinyGo probe (see package tinygoprobe): cel-go compiling
// and evaluating an expression over a dynamic object, as a MAP mutation's
// expression reads Object and object.
package main

import (
	"fmt"
	"os"

	"github.com/google/cel-go/cel"
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
	fmt.Println("ok", out.Value())
}

func fail(step string, err error) {
	fmt.Println("FAIL", step+":", err)
	os.Exit(1)
}
