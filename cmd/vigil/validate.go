package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vigil-cep/vigil/rules"
)

func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", "validate [--max-record-bytes N] RULES.yaml", stderr)
	maxRecord := fs.Int("max-record-bytes", rules.DefaultMaxRecordBytes, "the record limit the service runs with: whole events are bounded by it in the cost check")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := positive(fs, "max-record-bytes"); err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	path := pos[0]
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rs, err := rules.Load(src, rules.MaxRecordBytes(*maxRecord))
	if printRuleErrors(stdout, path, err) {
		return exitError{code: 1}
	}
	if err != nil {
		return err
	}
	for _, w := range rs.Warnings {
		fmt.Fprintf(stdout, "%s:%d:%d: warning: %s: %v\n", path, w.Line, w.Column, w.Path, w.Err)
	}
	fmt.Fprintf(stdout, "%s: ok (version %s: %d streams, %d windows, %d rules)\n",
		path, rs.Version, len(rs.Streams), len(rs.Windows), len(rs.Rules))
	return nil
}

// printRuleErrors prints a ruleset's load errors as file:line:col: path:
// message with the source line, and reports whether err was such a list.
func printRuleErrors(w io.Writer, path string, err error) bool {
	var list rules.ErrorList
	if !errors.As(err, &list) {
		return false
	}
	for _, e := range list {
		if e.Line > 0 {
			fmt.Fprintf(w, "%s:%d:%d: %s: %v\n", path, e.Line, e.Column, e.Path, e.Err)
		} else {
			fmt.Fprintf(w, "%s: %s: %v\n", path, e.Path, e.Err)
		}
		if e.Snippet != "" {
			fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(e.Snippet, "\n", "\n    "))
		}
	}
	fmt.Fprintf(w, "%d error(s)\n", len(list))
	return true
}
