package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-cep/vigil/asyncio"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/internal/gctune"
	"github.com/vigil-cep/vigil/replay"
	"github.com/vigil-cep/vigil/rules"
)

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", "replay RULES.yaml --events EVENTS.ndjson [--out OUT.ndjson]  (or --rules RULES.yaml)", stderr)
	rulesPath := fs.String("rules", "", "ruleset document (YAML or JSON)")
	eventsPath := fs.String("events", "-", "input records, NDJSON; - reads standard input")
	outPath := fs.String("out", "-", "output records, NDJSON; - writes standard output")
	maxRecord := fs.Int("max-record-bytes", replay.DefaultMaxRecordBytes, "larger input lines go to the DLQ")
	quiet := fs.Bool("quiet", false, "do not print the summary to standard error")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (go tool pprof) to this file")
	redisAddr := fs.String("redis", "", "Redis address (host:port) for the ruleset's redis enrichments")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := positive(fs, "max-record-bytes"); err != nil {
		return err
	}
	if len(pos) == 1 {
		if *rulesPath != "" {
			fmt.Fprintln(stderr, "give the ruleset once: as an argument or as --rules")
			fs.Usage()
			return errUsage
		}
		*rulesPath = pos[0]
	}
	if *rulesPath == "" {
		fmt.Fprintln(stderr, "a ruleset is required (RULES.yaml, or --rules)")
		fs.Usage()
		return errUsage
	}
	rs, err := loadRules(*rulesPath, *maxRecord)
	if err != nil {
		return err
	}
	in, out := io.Reader(os.Stdin), stdout
	if *eventsPath != "-" {
		f, err := os.Open(*eventsPath)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var outFile *os.File
	if *outPath != "-" {
		if outFile, err = os.Create(*outPath); err != nil {
			return err
		}
		defer outFile.Close()
		out = outFile
	}
	lookups, closeLookups := lookupFactory(*redisAddr)
	defer closeLookups()
	cfg := replay.Config{MaxRecordBytes: *maxRecord, Lookups: lookups}
	if isTerminal(stderr) {
		cfg.Progress = func(n int64, elapsed time.Duration) {
			fmt.Fprintf(stderr, "\r%d records, %.0f records/s ", n, float64(n)/elapsed.Seconds())
		}
	}
	defer gctune.GCPercent(gctune.ReplayGOGC)()
	defer gctune.MemoryLimit()()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	stats, err := replay.Run(ctx, rs, in, out, cfg)
	if cfg.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if outFile != nil {
		if err := outFile.Close(); err != nil {
			return err
		}
	}
	if !*quiet {
		elapsed := time.Since(start)
		b, _ := json.Marshal(stats)
		fmt.Fprintf(stderr, "replayed %d records in %s (%.0f records/s): %s\n",
			stats.Records, elapsed.Round(time.Millisecond), float64(stats.Records)/elapsed.Seconds(), b)
	}
	return nil
}

// lookupFactory builds enrichment lookups: HTTP ones from their URL, Redis
// ones on one client for addr (with per-call deadlines honoured, and no
// client-side retries: the enrichment retries within its timeout).
// lookupFactory builds the lookups of enrichments: one Redis client shared
// by all (tasks may call it concurrently), plain HTTP clients.
func lookupFactory(addr string) (engine.LookupFactory, func()) {
	var (
		mu     sync.Mutex
		client *redis.Client
	)
	factory := func(e *rules.Enrichment) (asyncio.Lookup, error) {
		if !e.Redis {
			return asyncio.NewHTTP(&http.Client{}, e.Method, e.URL, e.MaxBody), nil
		}
		if addr == "" {
			return nil, errors.New("it reads Redis: give --redis ADDR")
		}
		mu.Lock()
		defer mu.Unlock()
		if client == nil {
			client = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		}
		return asyncio.NewRedis(client, e.RedisMode), nil
	}
	return factory, func() {
		mu.Lock()
		defer mu.Unlock()
		if client != nil {
			client.Close()
		}
	}
}

// loadRules reads and compiles a ruleset for records of at most maxRecord
// bytes, printing every error with its position.
func loadRules(path string, maxRecord int) (*rules.Ruleset, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rs, err := rules.Load(src, rules.MaxRecordBytes(maxRecord))
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid ruleset (run vigil validate %s for details):\n%w", path, path, err)
	}
	return rs, nil
}

// isTerminal reports whether w is a terminal (progress goes there only).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
