package wasmbin

// The binary format's primitives, for the packages that rewrite a section of their own (host/opa
// defines the memory an OPA module imports) with the same reading and writing as this package.

// ReadULEB128 reads an unsigned LEB128 integer of at most 10 bytes from the start of b: its value
// and how many bytes it took.
func ReadULEB128(b []byte) (v uint64, n int, err error) { return uleb(b) }

// AppendULEB128 appends v as an unsigned LEB128 integer.
func AppendULEB128(b []byte, v uint64) []byte { return appendUleb(b, v) }

// ReadName reads a name (its length, then its bytes) from the start of b and returns the rest.
func ReadName(b []byte) (name string, rest []byte, err error) { return readName(b) }

// AppendSection appends a section: id, payload size, payload.
func AppendSection(out []byte, id byte, payload []byte) []byte {
	return appendSection(out, id, payload)
}
