//go:build !linux

package wasm

import "errors"

// mmapSupported: elsewhere pool instances keep Go slices (cappedMemory).
const mmapSupported = false

func mapMemory(uint64) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapMemory([]byte) {}
