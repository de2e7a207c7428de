package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

type exitStatus int

func (e exitStatus) Error() string   { return "exit" }
func (e exitStatus) ExitStatus() int { return int(e) }

// TestProgramRun pins the exit statuses and what is printed with them.
func TestProgramRun(t *testing.T) {
	fails := func(err error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(context.Context, []string, io.Writer, io.Writer) error { return err }
	}
	p := Program{Name: "prog", Title: "Prog: a test.", Commands: map[string]Command{
		"ok":     {"succeeds", fails(nil)},
		"broken": {"fails", fails(errors.New("no luck"))},
		"usage":  {"misused", fails(ErrUsage)},
		"asks":   {"asked for help", fails(flag.ErrHelp)},
		"three":  {"exits 3", fails(fmt.Errorf("wrapped: %w", exitStatus(3)))},
	}}
	const usage = "Prog: a test.\n\nUsage: prog <command> [flags]\n\nCommands:\n" +
		"  asks      asked for help\n  broken    fails\n  ok        succeeds\n  three     exits 3\n  usage     misused\n" +
		"\nRun 'prog <command> --help' for the flags of a command.\n"
	for _, tt := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, 2, usage},
		{[]string{"--help"}, 0, usage},
		{[]string{"nope"}, 2, "prog: unknown command \"nope\"\n\n" + usage},
		{[]string{"ok"}, 0, ""},
		{[]string{"broken"}, 1, "prog broken: no luck\n"},
		{[]string{"usage"}, 2, ""},
		{[]string{"asks"}, 0, ""},
		{[]string{"help"}, 0, usage},
		{[]string{"three"}, 3, ""},
	} {
		var stderr strings.Builder
		if code := p.Run(context.Background(), tt.args, io.Discard, &stderr); code != tt.code || stderr.String() != tt.stderr {
			t.Errorf("prog %q: exit %d, stderr %q; want %d, %q", tt.args, code, stderr.String(), tt.code, tt.stderr)
		}
	}
}

func TestNewFlagsUsage(t *testing.T) {
	p := Program{Name: "prog", Commands: map[string]Command{"cmd": {Summary: "does things"}}}
	var stderr strings.Builder
	fs := p.NewFlags("cmd", "cmd [--n N]", &stderr)
	fs.Int("n", 1, "how many")
	if err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
	const want = "Usage: prog cmd [--n N]\n\ndoes things\n\nFlags:\n  -n int\n    \thow many (default 1)\n"
	if stderr.String() != want {
		t.Errorf("usage %q, want %q", stderr.String(), want)
	}
}
