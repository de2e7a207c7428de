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
// two deliberate exceptions: arrays and objects nested deeper than [MaxDepth]
// are rejected (encoding/json allows 10000 levels), and so is a string that is
// not Unicode text, where encoding/json would put U+FFFD in its place. In
// particular:
//
//   - the grammar is RFC 8259: no trailing commas, no leading zeros, no NaN or
//     Infinity, no comments, no control characters inside strings, and only the
//     whitespace characters space, tab, line feed and carriage return;
//   - numbers are rounded to the nearest float64 as strconv.ParseFloat does,
//     and a number too large for float64 (such as 1e400) is an error;
//   - inside strings, every escape sequence is decoded; a byte that is not
//     part of valid UTF-8 (RFC 8259 §8.1) and a \u escape of a UTF-16
//     surrogate that is not half of a pair (RFC 7493, I-JSON, §2.1) are
//     errors, in member names too.
//
// Why not replace them with U+FFFD as encoding/json does: replacing merges
// different inputs. "w\xff" and "w\xfe" would both become "w\uFFFD", the same
// transaction id or user key, the same value to count_distinct. Refusing the
// text keeps every decoded string exactly what its input says. Finding these
// bytes costs nothing on text that is ASCII: they are checked where strings
// leave the ASCII fast path, as decoding UTF-8 has to anyway.
//
// Decoding never panics and never recurses deeper than [MaxDepth], whatever
// the input. Errors in the text are reported as a [*SyntaxError] carrying the
// byte offset of the problem.
//
// Strings without escape sequences are returned as substrings
// of the input, so they share its memory: decode strings that are kept, not
// strings converted unsafely from a reused buffer. Decoding a typical record
// allocates only the map and slice values it returns and one box for each
// string and number in them.
//
// [Skip] validates a value without building it (with the same checks, UTF-8
// included), and [Object] walks the members
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
