package replay

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// readLine is one line as readBatches delivers it.
type readLine struct {
	No        int64
	Text      string
	Oversized int // the record's length when it was cut, else 0
}

// readAll runs readBatches over in and lists its lines.
func readAll(t *testing.T, in io.Reader, maxRecord int) []readLine {
	t.Helper()
	var got []readLine
	next := int64(1)
	err := readBatches(context.Background(), in, maxRecord, func(b *batch) bool {
		if b.firstLine != next {
			t.Fatalf("batch starts at line %d, want %d", b.firstLine, next)
		}
		for i, text := range b.lines() {
			got = append(got, readLine{No: b.firstLine + int64(i), Text: text, Oversized: b.oversized[i]})
		}
		next += int64(len(b.ends))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// splitLines is the reference: lines end at '\n' (a last line may lack it);
// a line longer than maxRecord keeps its first min(dlqRawBytes, maxRecord+1)
// bytes and reports its length.
func splitLines(s string, maxRecord int) []readLine {
	var want []readLine
	for i, l := range strings.SplitAfter(s, "\n") {
		if l == "" {
			break // after a final '\n'
		}
		l = strings.TrimSuffix(l, "\n")
		rl := readLine{No: int64(i + 1), Text: l}
		if len(l) > maxRecord {
			rl.Text, rl.Oversized = l[:min(dlqRawBytes, maxRecord+1, len(l))], len(l)
		}
		want = append(want, rl)
	}
	return want
}

// TestReadBatches: lines come out whole and numbered whatever the reads
// return, across batch boundaries, with oversized lines cut and measured.
func TestReadBatches(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(f(i))
			b.WriteByte('\n')
		}
		return b.String()
	}
	big := strings.Repeat("x", 5000)
	inputs := map[string]string{
		"empty":            "",
		"one":              `{"a":1}`,
		"one newline":      "{\"a\":1}\n",
		"blank lines":      "\n\n a \n\n",
		"crlf":             "a\r\nb\r\n",
		"oversized":        "a\n" + big + "\nb\n",
		"oversized first":  big + "\nb",
		"oversized last":   "a\n" + big,
		"oversized at cap": "a\n" + big[:4096] + "\n" + big[:4097] + "\n" + big[:4095],
		"many short":       many(40_000, func(i int) string { return fmt.Sprint(i) }),
		"many oversized":   many(3_000, func(i int) string { return big[:i*7%5000] }),
		"batch by bytes":   many(2_000, func(i int) string { return big[:1000+i%3000] }),
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		"data+EOF": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
	}
	for name, in := range inputs {
		for rname, r := range readers {
			for _, maxRecord := range []int{4096, 10} {
				if rname == "one byte" && len(in) > 100_000 {
					continue // slow, and the short inputs cover it
				}
				t.Run(fmt.Sprintf("%s/%s/max%d", name, rname, maxRecord), func(t *testing.T) {
					want := splitLines(in, maxRecord)
					if diff := cmp.Diff(want, readAll(t, r(in), maxRecord)); diff != "" {
						t.Errorf("lines differ (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}
