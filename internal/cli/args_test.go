package cli

import (
	"flag"
	"fmt"
	"io"
	"testing"
)

// The positional arguments may come before or after the flags; "--" ends
// the flags.
func TestParseArgs(t *testing.T) {
	parse := func(args []string) (pos []string, out string, err error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o := fs.String("out", "", "")
		pos, err = ParseArgs(fs, args, 1)
		return pos, *o, err
	}
	for _, tt := range []struct {
		args []string
		pos  string
		out  string
		err  error
	}{
		{[]string{"r.yaml", "--out", "o"}, "[r.yaml]", "o", nil},
		{[]string{"--out", "o", "r.yaml"}, "[r.yaml]", "o", nil},
		{[]string{"--out", "o"}, "[]", "o", nil},
		{[]string{"--", "--out"}, "[--out]", "", nil},
		{[]string{"a.yaml", "b.yaml"}, "[]", "", ErrUsage},
		{[]string{"--bogus"}, "[]", "", ErrUsage},
		{[]string{"--help"}, "[]", "", flag.ErrHelp},
	} {
		pos, out, err := parse(tt.args)
		if err != tt.err || (err == nil && (fmt.Sprint(pos) != tt.pos || out != tt.out)) {
			t.Errorf("ParseArgs(%q) = %v, %v (out %q); want %s, %v (out %q)", tt.args, pos, err, out, tt.pos, tt.err, tt.out)
		}
	}
}
