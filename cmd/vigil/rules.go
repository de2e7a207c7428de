package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
	"github.com/vigil-cep/vigil/rules"
)

// A file written by `vigil rules pull` starts with a comment line recording
// the version it holds; `vigil rules push` reads it to refuse the file once
// another version is live, as If-Match does over REST, and strips it before
// publishing.
const baseVersionPrefix = "# vigil:base-version="

func baseVersionLine(v *kafka.RulesetVersion, topic string) string {
	return fmt.Sprintf("%s%d  (vigil rules pull from %s, digest %s; vigil rules push refuses this file once another version is live)\n",
		baseVersionPrefix, v.Number, topic, v.Digest)
}

// splitBaseVersion returns the version recorded in src's first line, if
// any, and src without that line.
func splitBaseVersion(src []byte) (base int64, body []byte, ok bool) {
	line, rest, _ := bytes.Cut(src, []byte("\n"))
	digits, found := bytes.CutPrefix(line, []byte(baseVersionPrefix))
	if !found {
		return 0, src, false
	}
	end := 0
	for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(string(digits[:end]), 10, 64)
	if err != nil {
		return 0, src, false
	}
	return n, rest, true
}

func runRules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "Usage: vigil rules push [flags] FILE | vigil rules pull [flags] (--help for each)"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "push":
		return runRulesPush(ctx, args[1:], stdout, stderr)
	case "pull":
		return runRulesPull(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	fmt.Fprintf(stderr, "vigil rules: unknown subcommand %q\n%s\n", args[0], usage)
	return errUsage
}

// newRulesFlags returns the flag set of a rules subcommand with the flags
// both share.
func newRulesFlags(synopsis, about string, stderr io.Writer) (fs *flag.FlagSet, kclient *kafkaClient, topic *string, timeout *time.Duration) {
	fs = flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vigil %s\n\n%s\n\nFlags:\n", synopsis, about)
		fs.PrintDefaults()
	}
	kclient = addKafkaClientFlags(fs, "", "Kafka bootstrap brokers, comma-separated (default: bootstrap.servers, or 127.0.0.1:9092)")
	topic = fs.String("rules-topic", kafka.DefaultTopics.Rules, "the rules topic")
	timeout = fs.Duration("timeout", 30*time.Second, "give up when the broker does not answer within this")
	return fs, kclient, topic, timeout
}

func runRulesPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, kclient, topic, timeout := newRulesFlags("rules pull [--brokers HOST:PORT] [--out FILE]",
		"Write the live ruleset document, as it was published, with a first line recording its version\n"+
			"(\""+baseVersionPrefix+"N ...\"). Edit the file and publish it with `vigil rules push FILE`,\n"+
			"which refuses it once another version is live, so that changes made since (over REST, by\n"+
			"another push) are never silently undone.", stderr)
	out := fs.String("out", "-", "write the document here; - for standard output")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	kc, err := rulesCluster(kclient)
	if err != nil {
		return err
	}
	vs, err := kafka.ReadRules(ctx, kc, *topic)
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return fmt.Errorf("no ruleset was published on %s yet", *topic)
	}
	live := vs[len(vs)-1]
	_, body, _ := splitBaseVersion([]byte(live.Document)) // a document pushed with its line over REST
	doc := append([]byte(baseVersionLine(live, *topic)), body...)
	if *out == "-" {
		_, err := stdout.Write(doc)
		return err
	}
	if err := os.WriteFile(*out, doc, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote version %d (digest %s, by %s at %s) to %s\n", live.Number, live.Digest,
		live.Author, live.Time.Format(time.RFC3339), *out)
	return nil
}

func runRulesPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, kclient, topic, timeout := newRulesFlags(
		"rules push [--brokers HOST:PORT] [--kafka-properties F] [--base-version N | --force] [--comment C] FILE",
		"Validate the ruleset FILE and publish it on the rules topic as the next version: it replaces the\n"+
			"whole live document. Refused unless the live version is the one FILE is based on: the version\n"+
			"`vigil rules pull` recorded in its first line, or --base-version N. A file with neither can only\n"+
			"be pushed to an empty topic, or with --force. Prints every item it adds (+), changes (~, with the\n"+
			"fields) and removes (-) against the live version; after a push, a pulled file records the new\n"+
			"version. The audit log records the SASL user of --kafka-properties as the author (on a cluster\n"+
			"without SASL: \"unauthenticated:$USER\").", stderr)
	comment := fs.String("comment", "", "why (the audit log)")
	baseFlag := fs.String("base-version", "", "the version FILE is based on (default: the one its first line records)")
	force := fs.Bool("force", false, "publish whatever version is live, replacing it and every change made since FILE was written")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	var flagBase int64
	var bad string
	if *baseFlag != "" {
		n, err := strconv.ParseInt(*baseFlag, 10, 64)
		switch {
		case err != nil || n < 0:
			bad = fmt.Sprintf("--base-version %q: not a version number", *baseFlag)
		case *force:
			bad = "give --base-version or --force, not both"
		}
		flagBase = n
	}
	if bad != "" || fs.NArg() != 1 {
		if bad != "" {
			fmt.Fprintln(stderr, bad)
		}
		fs.Usage()
		return errUsage
	}
	path := fs.Arg(0)
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	base, body, pulled := splitBaseVersion(src)
	// Validated as written, so that positions are the file's.
	if _, err := rules.Load(src); printRuleErrors(stderr, path, err) {
		fmt.Fprintln(stderr, "nothing published")
		return exitError{code: 1}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	kc, err := rulesCluster(kclient)
	if err != nil {
		return err
	}
	vs, err := kafka.ReadRules(ctx, kc, *topic)
	if err != nil {
		return err
	}
	var live *kafka.RulesetVersion
	var liveDoc []byte
	if len(vs) > 0 {
		live = vs[len(vs)-1]
		liveDoc = []byte(live.Document)
	}
	changes, err := rulesdoc.DiffDocuments(liveDoc, body)
	if err != nil {
		return fmt.Errorf("compare with the live version: %w", err)
	}

	liveN := int64(len(vs))
	if live != nil && bytes.Equal(liveDoc, body) {
		fmt.Fprintf(stdout, "%s is version %d already: nothing to publish\n", path, liveN)
		return nil
	}
	// --force ignores what the file is based on, not a race: the changes
	// printed are those against liveN, and PushRules publishes only on top
	// of it.
	expect := liveN
	switch {
	case *force:
	case *baseFlag != "":
		expect = flagBase
	case pulled:
		expect = base
	case live != nil:
		return refusePush(stderr, path, fmt.Sprintf("%s records no version it is based on (it was not written by `vigil rules pull`), "+
			"and version %d is live: pushing it would replace that version whole.", path, liveN), live, changes)
	}
	if expect != liveN {
		return refusePush(stderr, path, fmt.Sprintf("%s is based on version %d, but version %d is live: pushing it would undo what changed since.",
			path, expect, liveN), live, changes)
	}
	printChanges(stdout, live, changes)
	v, err := kafka.PushRules(ctx, kc, *topic, body, expect, os.Getenv("USER"), *comment)
	var tl *kafka.RulesetTooLargeError
	switch {
	case printRuleErrors(stderr, path, err):
	case errors.Is(err, service.ErrVersionConflict):
		fmt.Fprintf(stderr, "vigil rules push: refused: %v (another version was published meanwhile); pull it and retry\n", err)
	case errors.As(err, &tl):
		fmt.Fprintf(stderr, "vigil rules push: refused: %v\n", err)
	case err != nil:
		return err
	}
	if err != nil {
		fmt.Fprintln(stderr, "nothing published")
		return exitError{code: 1}
	}
	fmt.Fprintf(stdout, "published ruleset version %d (digest %s) on %s\n", v.Number, v.Digest, *topic)
	if pulled { // keep the file pushable: it is the new version now
		if err := os.WriteFile(path, append([]byte(baseVersionLine(v, *topic)), body...), 0o644); err != nil {
			return fmt.Errorf("published, but could not record version %d in %s: %w", v.Number, path, err)
		}
		fmt.Fprintf(stdout, "%s now records version %d\n", path, v.Number)
	}
	return nil
}

// rulesCluster resolves the connection of a rules subcommand: the local
// embedded broker unless told otherwise.
func rulesCluster(kclient *kafkaClient) (kconf.Config, error) {
	kc, err := kclient.config(os.Environ(), nil)
	if err != nil {
		return kc, err
	}
	if len(kc.Brokers) == 0 {
		kc.Brokers = []string{"127.0.0.1:9092"}
	}
	return kc, kc.Validate()
}

// refusePush explains why a push is refused and what it would have done.
func refusePush(stderr io.Writer, path, why string, live *kafka.RulesetVersion, changes []rulesdoc.Change) error {
	fmt.Fprintf(stderr, "vigil rules push: refused: %s\n", why)
	if live != nil {
		fmt.Fprintf(stderr, "version %d was published by %s at %s", live.Number, live.Author, live.Time.Format(time.RFC3339))
		if live.Comment != "" {
			fmt.Fprintf(stderr, " (%s)", live.Comment)
		}
		fmt.Fprintln(stderr)
	}
	printChanges(stderr, live, changes)
	fmt.Fprintf(stderr, "Pull the live version (vigil rules pull --out %s), make your change on it and push that;\n"+
		"or, to publish %s as it is over whatever is live, push with --force.\nnothing published\n", path, path)
	return exitError{code: 1}
}

// printChanges lists what a push changes in the live version, item by item.
func printChanges(w io.Writer, live *kafka.RulesetVersion, changes []rulesdoc.Change) {
	if live == nil {
		fmt.Fprintln(w, "changes (the topic is empty):")
	} else {
		fmt.Fprintf(w, "changes to version %d:\n", live.Number)
	}
	if len(changes) == 0 {
		fmt.Fprintln(w, "  none to any item (comments or layout only)")
	}
	for _, c := range changes {
		switch c.Op {
		case rulesdoc.Added:
			fmt.Fprintf(w, "  + %s/%s\n", c.Kind, c.Name)
		case rulesdoc.Removed:
			fmt.Fprintf(w, "  - %s/%s\n", c.Kind, c.Name)
		default:
			fields := strings.Join(c.FieldNames(), ", ")
			if fields == "" {
				fields = "the whole item"
			}
			fmt.Fprintf(w, "  ~ %s/%s: %s\n", c.Kind, c.Name, fields)
		}
	}
}
