// Command celk8s is a TinyGo probe (see package tinygoprobe): cel-go with the
// Kubernetes CEL libraries of k8s.io/apiserver/pkg/cel/library that need
// neither net nor net/http (lists, regex, URLs, quantity, IP, CIDR, semver,
// jsonpatch) and cel-go's extensions, each function evaluated once over an
// object, with the answers checked.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"k8s.io/apiserver/pkg/cel/library"
)

var cases = []struct{ expr, want string }{
	{`quantity(object.spec.memory).isGreaterThan(quantity("100Mi"))`, "true"},
	{`object.metadata.name.find("[0-9]+")`, "42"},
	{`[3, 1, 2].isSorted() || [1, 2, 3].isSorted()`, "true"},
	{`url("https://example.com:8443/x").getPort()`, "8443"},
	{`ip("10.0.0.1").family()`, "4"},
	{`cidr("10.0.0.0/8").containsIP("10.1.2.3")`, "true"},
	{`semver("1.36.2").minor()`, "36"},
	{`jsonpatch.escapeKey("k8s.io/x~y")`, "k8s.io~1x~0y"},
	{`object.metadata.?labels["env"].orValue("none")`, "none"},
	{`object.metadata.name.upperAscii()`, "WEB-42"},
	{`object.spec.containers.map(c, c.name).join(",")`, "a,b"},
}

func main() {
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType),
		cel.OptionalTypes(),
		ext.Strings(), ext.Lists(), ext.Sets(),
		library.Lists(), library.Regex(), library.URLs(), library.Quantity(),
		library.IP(), library.CIDR(), library.SemverLib(), library.JSONPatch(),
	)
	if err != nil {
		fail("NewEnv", err)
	}
	object := map[string]any{
		"metadata": map[string]any{"name": "web-42"},
		"spec": map[string]any{"memory": "1Gi", "containers": []any{
			map[string]any{"name": "a"}, map[string]any{"name": "b"},
		}},
	}
	start := time.Now()
	evals := 0
	for _, c := range cases {
		ast, iss := env.Compile(c.expr)
		if iss.Err() != nil {
			fail("Compile "+c.expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			fail("Program "+c.expr, err)
		}
		out, _, err := prg.Eval(map[string]any{"object": object})
		if err != nil {
			fail("Eval "+c.expr, err)
		}
		if got := fmt.Sprint(out.Value()); got != c.want {
			fail("Eval "+c.expr, fmt.Errorf("got %s, want %s", got, c.want))
		}
		for i := 0; i < 100; i++ { // for the mean evaluation time below
			if _, _, err := prg.Eval(map[string]any{"object": object}); err != nil {
				fail("Eval "+c.expr, err)
			}
			evals++
		}
	}
	fmt.Printf("ok %d expressions; %d evaluations, compile+eval %.1f us per evaluation\n",
		len(cases), evals, float64(time.Since(start).Microseconds())/float64(evals))
}

func fail(step string, err error) {
	fmt.Println("FAIL", step+":", err)
	os.Exit(1)
}
