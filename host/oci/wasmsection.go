package oci

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// metadataSection is the Wasm custom section holding Kubewarden metadata.
const metadataSection = "io.kubewarden.metadata"

var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// moduleAnnotations returns the annotations of the module's Kubewarden
// metadata, found=false when the module has no metadata section.
// It walks the section headers only; it does not validate the module.
func moduleAnnotations(wasm []byte) (annotations map[string]string, found bool, err error) {
	sec, found, err := customSection(wasm, metadataSection)
	if err != nil || !found {
		return nil, found, err
	}
	var md struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(sec, &md); err != nil {
		return nil, true, fmt.Errorf("%w: custom section %s is not JSON: %v", ErrInvalidModule, metadataSection, err)
	}
	return md.Annotations, true, nil
}

// customSection returns the payload of the first custom section called name.
func customSection(wasm []byte, name string) ([]byte, bool, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], wasmMagic) {
		return nil, false, fmt.Errorf("%w: missing \\0asm magic", ErrInvalidModule)
	}
	if v := binary.LittleEndian.Uint32(wasm[4:8]); v != 1 {
		return nil, false, fmt.Errorf("%w: binary version %d (want 1: a core module, not a component)", ErrInvalidModule, v)
	}
	p := wasm[8:]
	off := 8
	for len(p) > 0 {
		id := p[0]
		size, n := binary.Uvarint(p[1:])
		if n <= 0 || size > uint64(len(p)-1-n) {
			return nil, false, fmt.Errorf("%w: section at offset %d has a bad size", ErrInvalidModule, off)
		}
		body := p[1+n : 1+n+int(size)]
		if id == 0 {
			nl, m := binary.Uvarint(body)
			if m <= 0 || nl > uint64(len(body)-m) {
				return nil, false, fmt.Errorf("%w: custom section at offset %d has a bad name", ErrInvalidModule, off)
			}
			if string(body[m:m+int(nl)]) == name {
				return body[m+int(nl):], true, nil
			}
		}
		adv := 1 + n + int(size)
		p = p[adv:]
		off += adv
	}
	return nil, false, nil
}
