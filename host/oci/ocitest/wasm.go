package ocitest

import (
	"encoding/binary"
	"encoding/json"
)

// Wasm returns a valid, empty WebAssembly module (magic, version and custom
// sections only). With annotations != nil it carries an
// io.kubewarden.metadata section whose annotations are those; padding adds
// a custom section of that many bytes, to make big modules.
func Wasm(annotations map[string]string, padding int) []byte {
	out := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	if annotations != nil {
		md, _ := json.Marshal(map[string]any{
			"protocolVersion": "v1",
			"rules":           []any{},
			"mutating":        false,
			"annotations":     annotations,
		})
		out = append(out, customSection("io.kubewarden.metadata", md)...)
	}
	if padding > 0 {
		out = append(out, customSection("padding", make([]byte, padding))...)
	}
	return out
}

func customSection(name string, payload []byte) []byte {
	body := binary.AppendUvarint(nil, uint64(len(name)))
	body = append(body, name...)
	body = append(body, payload...)
	sec := []byte{0}
	sec = binary.AppendUvarint(sec, uint64(len(body)))
	return append(sec, body...)
}
