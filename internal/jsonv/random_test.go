package jsonv

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestDecodeRandom runs the FuzzDecode checks on JSON texts generated from
// the grammar, with the corners byte mutation rarely reaches (surrogate
// pairs, long digit strings, exponents at the limits), a third of them then
// broken by a small edit.
func TestDecodeRandom(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		var b strings.Builder
		genValue(r, &b, 0)
		s := b.String()
		if r.IntN(3) == 0 {
			s = mutate(r, s)
		}
		checkDecode(t, s)
		if t.Failed() {
			return
		}
	}
}

func genSpace(r *rand.Rand, b *strings.Builder) {
	for r.IntN(4) == 0 {
		b.WriteByte(" \t\r\n"[r.IntN(4)])
	}
}

func genValue(r *rand.Rand, b *strings.Builder, depth int) {
	genSpace(r, b)
	k := r.IntN(10)
	if depth > 3 && r.IntN(8) != 0 {
		k %= 6 // mostly scalars below a few levels, to keep texts small
	}
	switch k {
	case 0:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	case 1, 2:
		genNumber(r, b)
	case 3, 4, 5:
		genString(r, b)
	case 6, 7:
		b.WriteByte('[')
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteByte(',')
			}
			genValue(r, b, depth+1)
		}
		genSpace(r, b)
		b.WriteByte(']')
	case 8, 9:
		b.WriteByte('{')
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteByte(',')
			}
			genSpace(r, b)
			if r.IntN(2) == 0 {
				b.WriteString([]string{`"a"`, `"b"`, `"\u0061"`, `"\ud800"`, "\"\xff\"", `"\uFFFD"`}[r.IntN(6)])
			} else {
				genString(r, b)
			}
			genSpace(r, b)
			b.WriteByte(':')
			genValue(r, b, depth+1)
		}
		genSpace(r, b)
		b.WriteByte('}')
	}
	genSpace(r, b)
}

func genDigits(r *rand.Rand, b *strings.Builder, n int) {
	for range n {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
}

func genNumber(r *rand.Rand, b *strings.Builder) {
	if r.IntN(3) == 0 {
		b.WriteByte('-')
	}
	// Digit counts around the float64 fast path limits (15-19 digits,
	// exponents around 22) and far past them.
	lengths := []int{1, 2, 15, 16, 17, 19, 20, 25, 400}
	if r.IntN(3) == 0 {
		b.WriteByte('0')
	} else {
		b.WriteByte(byte('1' + r.IntN(9)))
		genDigits(r, b, lengths[r.IntN(len(lengths))]-1)
	}
	if r.IntN(2) == 0 {
		b.WriteByte('.')
		genDigits(r, b, lengths[r.IntN(len(lengths))])
	}
	if r.IntN(2) == 0 {
		b.WriteByte("eE"[r.IntN(2)])
		if r.IntN(2) == 0 {
			b.WriteByte("+-"[r.IntN(2)])
		}
		exps := []string{"0", "1", "21", "22", "23", "37", "300", "308", "309", "324", "325", "400", "0000000000000000000001", "99999999999999999999"}
		b.WriteString(exps[r.IntN(len(exps))])
	}
}

func genString(r *rand.Rand, b *strings.Builder) {
	b.WriteByte('"')
	for range r.IntN(6) {
		switch r.IntN(12) {
		case 0:
			b.WriteString([]string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`}[r.IntN(8)])
		case 1:
			b.WriteString(`\u`)
			for range 4 {
				b.WriteByte("0123456789abcdefABCDEF"[r.IntN(22)])
			}
		case 2: // surrogates, paired or not
			b.WriteString([]string{`\ud83d`, `\ude00`, `\uD800`, `\uDBFF`, `\uDC00`, `\uDFFF`}[r.IntN(6)])
		case 3:
			b.WriteString([]string{"é", "€", "😀", "\u2028", "\uFFFD", "\x7f"}[r.IntN(6)])
		case 4: // invalid UTF-8: stray continuation, truncated sequences, encoded surrogate, overlong
			b.WriteString([]string{"\x80", "\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"}[r.IntN(7)])
		default:
			b.WriteString([]string{"a", "tx_id", " ", "<&>", "0"}[r.IntN(5)])
		}
	}
	b.WriteByte('"')
}

// mutate makes a small edit to s that often makes it invalid.
func mutate(r *rand.Rand, s string) string {
	if s == "" {
		return s
	}
	i := r.IntN(len(s))
	switch r.IntN(4) {
	case 0:
		return s[:i] + s[i+1:]
	case 1:
		const bytes = ",:[]{}\"\\0e.-\x00 "
		return s[:i] + string(bytes[r.IntN(len(bytes))]) + s[i:]
	case 2:
		return s[:i]
	default:
		return s[:i] + s[i:] + s[:i] // duplicate a prefix at the end
	}
}
