package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// ErrUsage marks errors whose message is the usage text already printed:
// Program.Run exits with status 2 and prints nothing more.
var ErrUsage = errors.New("usage")

// Parse parses args, which hold flags only, mapping flag errors to ErrUsage
// (the flag package has printed them with the usage); --help returns
// flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	_, err := ParseArgs(fs, args, 0)
	return err
}

// ParseArgs parses args that may hold up to max positional arguments among
// the flags (`vigil replay rules.yaml --events e.ndjson` as well as the
// flags first), and returns them. After "--" everything is positional.
// More than max positional arguments print the usage and return ErrUsage.
func ParseArgs(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, ErrUsage
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
		return nil, ErrUsage
	}
	return pos, nil
}

// Positive refuses a zero or negative value of the named int, int64,
// float64 and duration flags of fs, naming the flag. Configurations that take a zero
// value for "the default" would otherwise run with the default without a
// word when a user writes "--queue-batches 0" or "--shutdown-timeout -1s".
// It panics on a name fs does not define, or a flag of another type: a
// mistake of the caller.
func Positive(fs *flag.FlagSet, names ...string) error {
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			panic(fmt.Sprintf("cli.Positive: no flag --%s", name))
		}
		switch v := f.Value.(flag.Getter).Get().(type) {
		case int:
			if v < 1 {
				return fmt.Errorf("--%s %d: give a positive number", name, v)
			}
		case int64:
			if v < 1 {
				return fmt.Errorf("--%s %d: give a positive number", name, v)
			}
		case time.Duration:
			if v <= 0 {
				return fmt.Errorf("--%s %s: give a positive duration", name, v)
			}
		case float64:
			if !(v > 0) {
				return fmt.Errorf("--%s %g: give a positive number", name, v)
			}
		default:
			panic(fmt.Sprintf("cli.Positive: --%s is a %T", name, v))
		}
	}
	return nil
}
