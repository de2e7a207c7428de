// Package cli holds the command-line plumbing that Vigil's commands share:
// vigil, the product, and vigil-bench, its measurement tools. A Program
// dispatches to its subcommands, prints the usage and maps errors to exit
// statuses; its flag sets print a subcommand's usage on --help; ParseArgs
// takes positional arguments among the flags. One implementation keeps the
// two commands' help, flag errors and exit statuses alike.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
)

// Command is one subcommand of a Program.
type Command struct {
	Summary string // one line, in the program's usage and the command's --help
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// Program is a command made of subcommands: `Name <command> [flags]`.
type Program struct {
	Name     string // as the user types it, in the usage and error messages
	Title    string // the first line of the usage
	Commands map[string]Command
}

// exitStatuser is an error that asks for a specific exit status (vigil
// validate: 1 when the document has errors), its message not printed (the
// command has said what went wrong). The method is not named ExitCode so
// that a wrapped *exec.ExitError, which has one, is still reported.
type exitStatuser interface {
	error
	ExitStatus() int
}

// Run runs the subcommand args[0] with the rest of args and returns the
// exit status: 0 on success or --help; 2 without a command, for an unknown
// one (both print the usage) or for ErrUsage; an exitStatuser's status; 1 for
// any other error, printed as "Name command: error".
func (p Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		p.Usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := p.Commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", p.Name, args[0])
		p.Usage(stderr)
		return 2
	}
	err := cmd.Run(ctx, args[1:], stdout, stderr)
	var es exitStatuser
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	case errors.As(err, &es):
		return es.ExitStatus()
	}
	fmt.Fprintf(stderr, "%s %s: %v\n", p.Name, args[0], err)
	return 1
}

// Usage prints the title and the commands, sorted, to w.
func (p Program) Usage(w io.Writer) {
	fmt.Fprintln(w, p.Title)
	fmt.Fprintf(w, "\nUsage: %s <command> [flags]\n\nCommands:\n", p.Name)
	names := make([]string, 0, len(p.Commands))
	for n := range p.Commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, p.Commands[n].Summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> --help' for the flags of a command.\n", p.Name)
}

// NewFlags returns the flag set of the subcommand name, whose --help (and
// any flag error) prints "Usage: Name synopsis", the command's summary and
// its flags to stderr.
func (p Program) NewFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s\n\n%s\n\nFlags:\n", p.Name, synopsis, p.Commands[name].Summary)
		fs.PrintDefaults()
	}
	return fs
}
