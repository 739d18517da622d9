// Package fastjson reads and edits JSON documents in place, without
// reflection, for policies built with TinyGo, whose reflection-based
// encoding/json dominates the time of a call on realistic objects.
//
// Reading: Parse gives the document's top Value, a view of its bytes; Get,
// Index, ForEach and ForEachMember walk it by skipping over the bytes of the
// values not asked for, so reading three fields of a 5 KB Pod touches the
// bytes once and allocates nothing. Str, Equals, Bool, Int and Float decode
// scalars exactly as encoding/json does (escapes, invalid UTF-8 and lone
// surrogates become U+FFFD). Object keys match exactly, and when a key
// appears twice the last one counts, as when encoding/json decodes into a
// map[string]any.
//
// Writing: an Editor records edits (Replace, Set, Append, Delete) against
// the original bytes and Bytes applies them, so the parts of the document a
// policy does not change are copied, not decoded and encoded again. The
// result decodes to the same value a policy would get by decoding, changing
// and encoding the document with encoding/json; the host turns it into a
// JSONPatch by value, so the patch is the same too. MutateRequest wraps the
// edited object into the Kubewarden ValidationResponse.
//
// Walking does not check the syntax of the document (the host checks every
// request before a policy sees it); Valid does, as json.Valid does, and a
// policy that may see other input calls it first. Malformed input never
// panics: a walk over it finds missing values.
//
// It is also the one home of the JSON primitives that the host and the
// built-in policies share: Index (the syntax check and index that Parse
// makes, for code that walks the bytes itself: the host's JSON Patch diff),
// SkipSpace, ScanString (one string's syntax check), Unquote and
// AppendUnquote (encoding/json's string decoding), AppendQuote and
// AppendQuoteBytes (json.Marshal's string escaping, byte for byte),
// AppendQuoteMinimal (only the escapes JSON requires, for answers a JSON
// decoder reads back) and AppendFloat (json.Marshal's float64 format).
//
// This package must not know about waPC, WASI, the host, or Kubernetes types:
// it depends only on the standard library's encoding/binary, math, strconv,
// unicode/utf8 and unicode/utf16, and builds with TinyGo and standard Go.
package fastjson
