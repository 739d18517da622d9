package mapdiff_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/policy"
)

// TestParserLimits: expressions cel-go's parser stops at one of its limits
// (more than 100 syntax errors, 30 error recoveries, the lookahead of a
// recovery, a rule nested past 250 while parsing, brackets included and
// after another error, and a tree past 250 while building the AST: cel-go
// stops each with a panic it recovers) make the
// module refuse the settings with the issues Kubernetes' CEL environment
// gives for them natively (compiled here with the apiserver's stored
// expressions environment), not trap. The TinyGo module needs the
// build-time patch parserabort for this (scripts/tinygo-patches).
func TestParserLimits(t *testing.T) {
	module := loadModule(t)
	ctx := context.Background()
	host, err := policy.NewHost(ctx, policy.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close(ctx)
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, expr, limit string }{
		// the 101st syntax error stops the parser (cel-go shows 100)
		{"syntax errors", strings.Repeat("#", 150) + "[]", "token recognition error at: '#'"},
		{"error recoveries", strings.Repeat("(1 1) + ", 40) + "[]", "error recovery attempt limit exceeded: 30"},
		{"lookahead while recovering", "1 + ) " + strings.Repeat("a ", 300), "error recovery token lookahead limit exceeded: 256"},
		{"rule depth while parsing", strings.Repeat("true ? 1 : ", 300) + "[]", "expression recursion limit exceeded: 250"},
		{"brackets nested while parsing", strings.Repeat("[", 300) + strings.Repeat("]", 300), "expression recursion limit exceeded: 250"},
		{"brackets nested after syntax errors", "1 + + " + strings.Repeat("(", 260) + "1" + strings.Repeat(")", 260), "expression recursion limit exceeded: 250"},
		{"tree depth while building", "[object" + strings.Repeat(".b", 300) + "]", "max recursion depth exceeded"},
		{"operators while building", "[" + strings.Repeat("1 + ", 300) + "1]", "max recursion depth exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, iss := env.Compile(c.expr)
			if iss.Err() == nil || !strings.Contains(iss.String(), c.limit) {
				t.Fatalf("natively: %v, want the limit %q (the case does not test what it says)", iss.Err(), c.limit)
			}
			settings, err := yaml.YAMLToJSON([]byte(mkPolicy("limits", "", jsonPatch(c.expr))))
			if err != nil {
				t.Fatal(err)
			}
			p, err := host.Load(ctx, policy.Spec{ID: "limits", Module: module, Settings: settings, Timeout: time.Minute, PoolSize: 1})
			if err == nil {
				p.Close(ctx)
				t.Fatal("the module accepted the settings")
			}
			if !strings.Contains(err.Error(), "compilation failed: "+iss.String()) {
				t.Fatalf("the module refused the settings with\n%.2000s\nwant the issues Kubernetes gives:\n%.2000s", err, iss.String())
			}
		})
	}
}
