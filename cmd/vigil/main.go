// Command vigil is the Vigil fraud-rules engine: it replays event files through
// a ruleset, validates rulesets, and generates synthetic workloads.
//
// main only parses flags, builds components and runs them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/vigil-cep/vigil/internal/cli"
)

// command is one vigil subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands (a function, not a variable: the commands
// themselves read it for their --help).
func commands() map[string]command {
	return map[string]command{
		"replay":   {"run a ruleset over an NDJSON event file and print every output record", runReplay},
		"validate": {"check a ruleset document and report every mistake with its position", runValidate},
		"gen":      {"write a synthetic workload with planted fraud (NDJSON for replay), or produce it live to Kafka (--brokers)", runGen},
		"version":  {"print the version", runVersion},
		"serve":    {"run the rules over Kafka (an embedded broker unless --brokers is given)", runServe},
		"broker":   {"run the embedded Kafka-protocol broker alone", runBroker},
		"rules":    {"rules pull: write the live ruleset to a file; rules push FILE: publish it as the next version", runRules},
	}
}

// program is vigil with its commands.
func program() cli.Program {
	cmds := make(map[string]cli.Command)
	for name, c := range commands() {
		cmds[name] = cli.Command{Summary: c.summary, Run: c.run}
	}
	return cli.Program{Name: "vigil", Title: "Vigil: real-time complex-event processing and fraud rules.", Commands: cmds}
}

// errUsage marks errors whose message is the usage text already printed.
var errUsage = cli.ErrUsage

// exitError carries a specific exit status (validate: 1 when the document has errors).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// ExitStatus is the status vigil exits with (cli.Program.Run).
func (e exitError) ExitStatus() int { return e.code }

func main() { os.Exit(program().Main()) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return program().Run(ctx, args, stdout, stderr)
}

// newFlags returns a flag set whose --help prints the command's usage.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	return program().NewFlags(name, synopsis, stderr)
}

// parse parses args, mapping flag errors to errUsage (the flag package has
// printed them with the usage).
func parse(fs *flag.FlagSet, args []string) error {
	return cli.Parse(fs, args)
}

// parseArgs parses args that may hold up to max positional arguments among
// the flags, and returns them (cli.ParseArgs).
func parseArgs(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	return cli.ParseArgs(fs, args, max)
}

// positive refuses a zero or negative value of the named flags
// (cli.Positive).
func positive(fs *flag.FlagSet, names ...string) error {
	return cli.Positive(fs, names...)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "vigil", version())
	return nil
}

// version is the module version, or the VCS revision for a build from a checkout.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" && (v == "" || v == "(devel)") {
		return rev[:min(12, len(rev))] + dirty
	}
	return v
}
