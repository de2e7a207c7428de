// Command vigil is the Vigil fraud-rules engine: it replays event files through
// a ruleset, validates rulesets, and generates synthetic workloads.
//
// main only parses flags, builds components and runs them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
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
		"loadtest": {"send decision requests to a running vigil serve at a fixed rate and report latencies", runLoadtest},
		"bench":    {"measure throughput and latency: Kafka pass-through ceiling, replay, Vigil over Kafka", runBench},
	}
}

// errUsage marks errors whose message is the usage text already printed.
var errUsage = errors.New("usage")

// exitError carries a specific exit status (validate: 1 when the document has errors).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "vigil: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var ee exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &ee):
		return ee.code
	}
	fmt.Fprintf(stderr, "vigil %s: %v\n", args[0], err)
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Vigil: real-time complex-event processing and fraud rules.")
	fmt.Fprintln(w, "\nUsage: vigil <command> [flags]\n\nCommands:")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'vigil <command> --help' for the flags of a command.")
}

// newFlags returns a flag set whose --help prints the command's usage.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vigil %s\n\n%s\n\nFlags:\n", synopsis, commands()[name].summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, mapping flag errors to errUsage (the flag package has
// printed them with the usage).
func parse(fs *flag.FlagSet, args []string) error {
	_, err := parseArgs(fs, args, 0)
	return err
}

// parseArgs parses args that may hold up to max positional arguments among
// the flags (`vigil replay rules.yaml --events e.ndjson` as well as the
// flags first), and returns them. After "--" everything is positional.
func parseArgs(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // the flag package consumed "--"
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) > max {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %s\n", strings.Join(pos[max:], " "))
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
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
