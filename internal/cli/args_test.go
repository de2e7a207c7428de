package cli

import (
	"flag"
	"fmt"
	"io"
	"testing"
	"time"
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

func TestPositive(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for no error
	}{
		{nil, ""},
		{[]string{"--n", "3", "--d", "1ms", "--i", "9"}, ""},
		{[]string{"--n", "0"}, "--n 0: give a positive number"},
		{[]string{"--n", "-4"}, "--n -4: give a positive number"},
		{[]string{"--i", "0"}, "--i 0: give a positive number"},
		{[]string{"--d", "0s"}, "--d 0s: give a positive duration"},
		{[]string{"--d", "-1s"}, "--d -1s: give a positive duration"},
		{[]string{"--f", "0.5"}, ""},
		{[]string{"--f", "0"}, "--f 0: give a positive number"},
		{[]string{"--f", "NaN"}, "--f NaN: give a positive number"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.Int("n", 1, "")
		fs.Int64("i", 1, "")
		fs.Duration("d", time.Second, "")
		fs.Float64("f", 1, "")
		fs.Int("free", 0, "") // not checked: 0 is allowed
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := Positive(fs, "n", "i", "d", "f")
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Positive of an undefined flag did not panic")
		}
	}()
	Positive(flag.NewFlagSet("t", flag.ContinueOnError), "nope")
}
