package gkdiff

import "errors"

// NativeSide runs the engine natively (placeholder until the engine exists).
type NativeSide struct{}

func (NativeSide) Name() string { return "native" }

func (NativeSide) Load(settings []byte) (Loaded, error) {
	return nil, errors.New("the engine is not built yet")
}

func (NativeSide) Close() {}
