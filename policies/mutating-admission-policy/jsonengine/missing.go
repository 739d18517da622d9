package jsonengine

import "github.com/google/cel-go/cel"

// What the apiserver's environment has and this engine does not have yet, in
// any build (native or TinyGo), so that both answer alike: the format library
// (it needs k8s.io/apimachinery's validation, which imports net; an
// expression using it does not compile, so such a policy is refused rather
// than answered differently). A step of issue 31.

func formatLibraries() []cel.EnvOption { return nil }
