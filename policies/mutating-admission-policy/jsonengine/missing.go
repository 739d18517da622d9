package jsonengine

import "github.com/google/cel-go/cel"

// What the apiserver's environment has and this engine does not have yet, in
// any build (native or TinyGo), so that both answer alike. Each is a step of
// issue 31: the authorizer and authorizer.requestResource variables with the
// authz libraries (tollgate answers from the settings' RBAC objects), the
// format library (needs k8s.io/apimachinery's validation, which imports net)
// and the library cost estimator (runtime costs of the Kubernetes library
// functions; without it their calls cost what cel-go's default says).

func authzLibraries() []cel.EnvOption      { return nil }
func formatLibraries() []cel.EnvOption     { return nil }
func authorizerVariables() []cel.EnvOption { return nil }
func costTracking() []cel.ProgramOption    { return nil }
