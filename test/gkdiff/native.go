package gkdiff

import (
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine"
)

// NativeSide runs the module's engine natively (standard Go), with the same
// Request the guest builds from an admission request.
type NativeSide struct{}

func (NativeSide) Name() string { return "native" }

func (NativeSide) Load(settings []byte) (Loaded, error) {
	s, err := engine.Compile(settings)
	if err != nil {
		return nil, err
	}
	return nativeLoaded{s}, nil
}

func (NativeSide) Close() {}

type nativeLoaded struct{ s *engine.System }

func (l nativeLoaded) Evaluate(req Request) (Outcome, error) {
	mutated, changed, err := l.s.Mutate(engine.Request{
		Operation: req.Operation,
		Kind:      engine.GVK{Group: req.Group, Version: req.Version, Kind: req.Kind},
		Name:      req.Name,
		Namespace: req.Namespace,
		Username:  req.Username,
		Object:    req.Object,
		OldObject: oldObject(req),
	})
	if err != nil {
		return Outcome{Rejected: true, Message: err.Error()}, nil
	}
	if !changed {
		return Outcome{}, nil
	}
	return mutatedOutcome(req.Object, mutated)
}

func (nativeLoaded) Close() {}
