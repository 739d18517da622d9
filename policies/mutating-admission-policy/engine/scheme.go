package engine

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// newObjectScheme returns the scheme of the built-in kinds, from client-go.
func newObjectScheme() *runtime.Scheme { return scheme.Scheme }
