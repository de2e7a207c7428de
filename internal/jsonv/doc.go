// Package jsonv decodes JSON text into Go values and appends Go values as
// deterministic JSON. It is built for the hot path of Vigil's NDJSON ingest,
// where every record is decoded once and input may be hostile.
//
// # Decoding
//
// [Decode] and [DecodePrefix] produce the same values encoding/json's
// Unmarshal produces for a target of type any:
//
//   - objects become map[string]any (for a duplicated key the last member wins),
//   - arrays become []any,
//   - strings become string,
//   - numbers become float64,
//   - true and false become bool,
//   - null becomes nil.
//
// They accept and reject exactly the texts Unmarshal accepts and rejects, with
// one deliberate exception: arrays and objects nested deeper than [MaxDepth]
// are rejected (encoding/json allows 10000 levels). In particular:
//
//   - the grammar is RFC 8259: no trailing commas, no leading zeros, no NaN or
//     Infinity, no comments, no control characters inside strings, and only the
//     whitespace characters space, tab, line feed and carriage return;
//   - numbers are rounded to the nearest float64 as strconv.ParseFloat does,
//     and a number too large for float64 (such as 1e400) is an error;
//   - inside strings, every escape sequence is decoded, a \u escape that is an
//     unpaired UTF-16 surrogate becomes U+FFFD, and each byte that is not part
//     of valid UTF-8 becomes U+FFFD.
//
// Decoding never panics and never recurses deeper than [MaxDepth], whatever
// the input. Errors in the text are reported as a [*SyntaxError] carrying the
// byte offset of the problem.
//
// Strings without escape sequences or invalid UTF-8 are returned as substrings
// of the input, so they share its memory: decode strings that are kept, not
// strings converted unsafely from a reused buffer. Decoding a typical record
// allocates only the map and slice values it returns and one box for each
// string and number in them.
//
// [Skip] validates a value without building it, and [Object] walks the members
// of an object, so a caller can decode just the members it needs.
//
// # Encoding
//
// [Append] writes Go values as JSON that is byte for byte what an
// encoding/json Encoder with SetEscapeHTML(false) writes (without the Encoder's
// trailing newline), except where encoding/json would fail: NaN and infinities
// become null, and a value encoding/json cannot encode becomes a JSON string
// holding the error message, so Append always produces valid JSON. Map keys are
// sorted bytewise, so equal values always encode to equal bytes. The common
// types are encoded without reflection; anything else goes through
// encoding/json. [Raw] embeds JSON text that is already encoded.
package jsonv
