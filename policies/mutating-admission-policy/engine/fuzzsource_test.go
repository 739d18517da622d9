package engine

// fuzzSource hands a fuzz input's bytes to the generators of structured
// inputs (FuzzFastApply, the JSONPatch and ujson fuzz targets), one at a
// time and 0 once the input is exhausted: the committed corpora decode to
// the inputs they were found as.
type fuzzSource struct {
	b []byte
}

func (f *fuzzSource) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzSource) intn(n int) int { return int(f.byte()) % n }

// bytes takes the next n bytes, fewer when the input ends.
func (f *fuzzSource) bytes(n int) []byte {
	n = min(n, len(f.b))
	s := f.b[:n]
	f.b = f.b[n:]
	return s
}
