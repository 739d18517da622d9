package fastjson

import (
	"math"
	"strconv"
)

// AppendFloat appends f as json.Marshal writes a float64: strconv's
// shortest 'f' format, or 'e' below 1e-6 or from 1e21 on (absolute value),
// with a one-digit negative exponent written e-7, not e-07. json.Marshal
// refuses NaN and the infinities; so does AppendFloat (ok false, dst as it
// was), and the caller decides what to write instead.
func AppendFloat(dst []byte, f float64) (_ []byte, ok bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-07 -> e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
