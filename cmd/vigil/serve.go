package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/vigil-cep/vigil"
	"github.com/vigil-cep/vigil/api"
	"github.com/vigil-cep/vigil/console"
	"github.com/vigil-cep/vigil/internal/gctune"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/telemetry"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "serve [RULES.yaml] [--brokers HOST:PORT,...] [flags]  (RULES.yaml, or --rules, seeds an empty rules topic)", stderr)
	d := kafka.DefaultConfig
	cfg := d
	rulesPath := fs.String("rules", "", "ruleset that seeds the rules topic when it is empty (default: the example ruleset)")
	kclient := addKafkaClientFlags(fs, "", "Kafka bootstrap brokers, comma-separated; without them (or bootstrap.servers) the embedded broker starts")
	listen := fs.String("kafka-listen", "127.0.0.1:9092", "address of the embedded broker (without --brokers)")
	brokerSec := addBrokerSecurityFlags(fs, "broker-", "kafka-listen")
	fs.StringVar(&cfg.DataDir, "data-dir", d.DataDir, "checkpoints (and the embedded broker's log) live here")
	fs.StringVar(&cfg.Group, "group", d.Group, "consumer group: instances in one group share the partitions")
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "static group member id, stable across restarts (default: from the host name and --data-dir)")
	partitions := fs.Int("partitions", int(d.Partitions), "partitions of the topics Vigil creates (tasks run one per partition)")
	fs.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", d.CheckpointInterval, "how often each task checkpoints and commits; under --delivery exactly-once outputs become visible at a checkpoint, and the default is "+kafka.ExactlyOnceDefaults.CheckpointInterval.String())
	fs.IntVar(&cfg.CheckpointBaseEvery, "checkpoint-base-every", d.CheckpointBaseEvery, "checkpoints are deltas of what changed; after this many a task merges its chain into a new full base (bounds what a restore reads); under --delivery exactly-once the default is "+strconv.Itoa(kafka.ExactlyOnceDefaults.CheckpointBaseEvery))
	fs.StringVar(&cfg.Delivery, "delivery", d.Delivery, "at-least-once (an output may be written again after a crash, identical) or exactly-once (each task's outputs and checkpoint in one Kafka transaction: read_committed consumers see each output once; needs --checkpoints kafka, the default then)")
	fs.IntVar(&cfg.CheckpointKeep, "checkpoint-keep", d.CheckpointKeep, "checkpoint chains (a base and its deltas) kept per task: a corrupt newest one falls back to the previous")
	fs.StringVar(&cfg.Checkpoints, "checkpoints", "", "checkpoint store: dir (files under --data-dir) or kafka (the checkpoints topic, which lets any instance of the group restore any task); default kafka with --brokers, dir without")
	freezeIdle := fs.Duration("freeze-idle", d.FreezeIdle, "a key unchanged this long (at most twice it) is kept as its checkpoint record, which the collector does not scan, until it is next used: less collector work at many idle keys, a few microseconds to use one again; 0: never (a restore still leaves keys so until used)")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", d.SessionTimeout, "how long the group waits for a silent instance before moving its partitions")
	fs.IntVar(&cfg.QueueBatches, "queue-batches", d.QueueBatches, "fetched batches queued per task before its partitions pause")
	fs.IntVar(&cfg.MaxBufferedRecords, "max-buffered-records", d.MaxBufferedRecords, "unacknowledged output records before tasks wait")
	fs.DurationVar(&cfg.Linger, "linger", d.Linger, "producer linger: 0 sends at once (latency); a few ms batches more (throughput)")
	fs.DurationVar(&cfg.FetchMaxWait, "fetch-max-wait", d.FetchMaxWait, "how long a fetch may wait for data (latency vs. fewer requests)")
	fetchMinBytes := fs.Int("fetch-min-bytes", int(d.FetchMinBytes), "bytes a fetch waits for, up to --fetch-max-wait: 1 returns with the first record (latency); 65536 with --fetch-max-wait 10ms carries many records per fetch under load (fewer requests, but about 7 ms more from input record to decision; the decision API's own events are fetched back in bulk without it)")
	fs.IntVar(&cfg.MaxRecordBytes, "max-record-bytes", d.MaxRecordBytes, "larger input records go to the DLQ")
	redisAddr := fs.String("redis", "", "Redis address (host:port) for the ruleset's redis enrichments")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", d.ShutdownTimeout, "bound on the final drain and checkpoint after SIGTERM, and on a task's when the group moves its partition away")
	fs.DurationVar(&cfg.RuleTimeLimit, "rule-time-limit", d.RuleTimeLimit, "a rule evaluation running longer is stopped (its decision records the error) and the rule quarantined: disabled in a new ruleset version")
	requestTimeout := fs.Duration("request-timeout", api.DefaultRequestTimeout, "deadline of every API request but backtests: past it the answer is 503")
	t := &cfg.Topics
	fs.StringVar(&t.Decisions, "decisions-topic", d.Topics.Decisions, "decision records (key = transaction id)")
	fs.StringVar(&t.Alerts, "alerts-topic", d.Topics.Alerts, "pattern matches and timeouts")
	fs.StringVar(&t.Joins, "joins-topic", d.Topics.Joins, "interval-join pairs")
	fs.StringVar(&t.Windows, "windows-topic", d.Topics.Windows, "window results")
	fs.StringVar(&t.Late, "late-topic", d.Topics.Late, "late side output")
	fs.StringVar(&t.DLQ, "dlq-topic", d.Topics.DLQ, "unreadable input records")
	fs.StringVar(&t.Rules, "rules-topic", d.Topics.Rules, "ruleset versions (compacted)")
	fs.StringVar(&t.Checkpoints, "checkpoints-topic", d.Topics.Checkpoints, "task snapshots, with --checkpoints kafka")
	httpAddr := fs.String("http", "127.0.0.1:8080", "REST API, /metrics and health checks; empty: none")
	advertise := fs.String("advertise-http", "", "host:port at which the other instances of the group reach this one's API, to forward it the requests for its keys (default: --http, unless that is a wildcard address)")
	peerSecretFile := fs.String("peer-secret-file", "", "file holding the secret the group's instances sign forwarded requests with (also "+peerSecretEnv+"=secret); without it, a request for a key another instance owns is answered 503")
	fs.DurationVar(&cfg.RouteWait, "route-wait", d.RouteWait, "how long a request waits for the owner of its key while the group rebalances, before 503")
	keysFile := fs.String("api-keys", "", "API keys (YAML or JSON list of {name, role, token}); also "+api.KeysEnv+"=name:role:token,...; without keys the API is open on a loopback address only")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (go tool pprof) of the whole run to this file")
	pprofAddr := fs.String("pprof", "", "serve Go's profiling endpoints (/debug/pprof/: CPU, heap, execution trace) on this loopback address, e.g. 127.0.0.1:6060; empty: none")
	heapRatio := fs.Float64("heap-ratio", gctune.ServeHeapRatio, "collect when the heap reaches this multiple of the live heap, or 512 MiB while that is more; 0: off, and the heap may grow to five times the state (GOGC 400) within the soft memory limit. Less memory for more collector work (docs/performance.md)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.String(configFlag, "", "YAML or JSON file of flag name: value (also VIGIL_CONFIG); precedence: flag > VIGIL_<FLAG> environment > this file > default (deployments/CONFIG.md)")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
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
	kafkaProps, err := applyConfig(fs, os.Environ())
	if err != nil {
		return err
	}
	if r := *heapRatio; r != 0 && !(r > 1) {
		// Under 1 the limit would sit below the state itself, and the
		// collector would run without end.
		return fmt.Errorf("--heap-ratio %g: give 0 (off) or a multiple above 1", r)
	}
	if err := positive(fs, "partitions", "checkpoint-interval", "checkpoint-base-every", "checkpoint-keep",
		"session-timeout", "queue-batches", "max-buffered-records", "max-record-bytes", "shutdown-timeout",
		"rule-time-limit", "request-timeout", "route-wait"); err != nil {
		return err
	}
	if cfg.Linger < 0 {
		return fmt.Errorf("--linger %s: give 0 (send at once) or a positive duration", cfg.Linger)
	}
	if w := cfg.FetchMaxWait; w < 10*time.Millisecond || w > time.Minute {
		// franz-go refuses less than 10ms; over a minute a fetch
		// would outlive the broker's request timeout.
		return fmt.Errorf("--fetch-max-wait %s: give 10ms to 1m", w)
	}
	if n := *fetchMinBytes; n < 1 || n > 1<<20 {
		return fmt.Errorf("--fetch-min-bytes %d: give 1 to 1048576", n)
	}
	cfg.FetchMinBytes = int32(*fetchMinBytes)
	switch f := *freezeIdle; {
	case f < 0:
		return fmt.Errorf("--freeze-idle %s: give 0 (never) or a positive duration", f)
	case f == 0:
		cfg.FreezeIdle = -1 // kafka.Config: never
	default:
		cfg.FreezeIdle = f
	}
	if cfg.Delivery == kafka.ExactlyOnce {
		// Checkpoint flags left at their at-least-once defaults take
		// exactly-once's (kafka.Config: zero values).
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["checkpoint-interval"] {
			cfg.CheckpointInterval = 0
		}
		if !set["checkpoint-base-every"] {
			cfg.CheckpointBaseEvery = 0
		}
	}
	kc, err := kclient.config(os.Environ(), kafkaProps)
	if err != nil {
		return err
	}
	cfg.Partitions = int32(*partitions)
	defer gctune.MemoryLimit()()
	defer gctune.Serve(*heapRatio)()
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
	log, err := telemetry.NewLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	if *pprofAddr != "" {
		bound, stop, err := startPprof(*pprofAddr)
		if err != nil {
			return err
		}
		defer stop()
		log.Info("profiling endpoints", "addr", "http://"+bound+"/debug/pprof/")
	}
	cfg.Logger = log
	tel, err := telemetry.New(telemetry.Options{Version: version()})
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.Background())
	cfg.Metrics = tel.Metrics()
	apiOpts, err := apiOptions(*httpAddr, *keysFile, log)
	if err != nil {
		return err
	}
	secret, err := peerSecret(*peerSecretFile)
	if err != nil {
		return err
	}
	// The API listens before the service joins its group: the address it
	// advertises there is the one bound (--http with port 0 included).
	var ln net.Listener
	if *httpAddr != "" {
		if ln, err = net.Listen("tcp", *httpAddr); err != nil {
			return fmt.Errorf("--http: %w", err)
		}
		defer ln.Close()
		*httpAddr = ln.Addr().String()
		if cfg.AdvertiseHTTP, err = advertiseAddr(*advertise, ln.Addr()); err != nil {
			return err
		}
		if cfg.AdvertiseHTTP == "" {
			log.Warn("the API listens on a wildcard address and --advertise-http is not set: the group's other instances cannot forward this one the requests for its keys", "http", *httpAddr)
		}
	}

	if len(kc.Brokers) == 0 {
		// Serve's clients reach the broker inside the process, as the
		// users file's first superuser (or as the credentials of the
		// Kafka client properties): startEmbeddedBroker.
		b, err := startEmbeddedBroker(kafka.BrokerConfig{Listen: *listen, DataDir: filepath.Join(cfg.DataDir, "broker"),
			Partitions: cfg.Partitions}, brokerSec, kc, log)
		if err != nil {
			return err
		}
		defer b.Close()
		log.Info("embedded broker", "addr", b.Addr(), "data", filepath.Join(cfg.DataDir, "broker"), "client", b.Client)
		cfg.Kafka = b.Client
	} else {
		cfg.Kafka = kc
		log.Info("kafka", "cluster", kc)
		if cfg.Checkpoints == "" {
			cfg.Checkpoints = kafka.CheckpointsKafka // several instances may share the group
		}
	}
	lookups, closeLookups := lookupFactory(*redisAddr)
	defer closeLookups()
	cfg.Lookups = lookups
	var ruleset []byte // nil: the example ruleset
	if *rulesPath != "" {
		if ruleset, err = os.ReadFile(*rulesPath); err != nil {
			return err
		}
	}
	svc, err := vigil.Open(ctx, cfg, ruleset)
	if err != nil {
		return err
	}
	running := false
	defer func() {
		if !running {
			svc.Close() // an error before Run: Run closes what it opened
		}
	}()
	var srv *http.Server
	if *httpAddr != "" {
		apiOpts.Logger = log
		apiOpts.RequestTimeout = *requestTimeout
		apiOpts.Metrics = tel.MetricsHandler()
		apiOpts.Middleware = tel.HTTPMiddleware(func(r *http.Request) string {
			if rc := chi.RouteContext(r.Context()); rc != nil {
				return rc.RoutePattern()
			}
			return ""
		})
		if apiOpts.Console, err = console.New(); err != nil {
			return err
		}
		apiOpts.Peers = &api.Peers{Secret: secret, OnForward: tel.Metrics().Forwarded}
		h, err := api.New(tracedBackend{svc, tel}, apiOpts)
		if err != nil {
			return err
		}
		srv = api.NewServer(*httpAddr, h)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
	}
	current, err := svc.Ruleset(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "vigil serving ruleset %s on %s (decisions: %s, api: http://%s)\n", current.Digest,
		strings.Join(cfg.Kafka.Brokers, ","), cfg.Topics.Decisions, *httpAddr)
	running = true
	runErr := svc.Run(ctx)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}
	return runErr
}

// apiOptions reads the API keys: from a file, from the environment, or none,
// which is allowed on a loopback address only (a newcomer's machine).
func apiOptions(addr, keysFile string, log *slog.Logger) (api.Options, error) {
	var opts api.Options
	if addr == "" {
		return opts, nil
	}
	var keys []api.Key
	if keysFile != "" {
		k, err := api.LoadKeys(keysFile)
		if err != nil {
			return opts, err
		}
		keys = k
	}
	if env := os.Getenv(api.KeysEnv); env != "" {
		k, err := api.ParseKeyList(env)
		if err != nil {
			return opts, fmt.Errorf("%s: %w", api.KeysEnv, err)
		}
		keys = append(keys, k...)
	}
	opts.Keys = keys
	if len(keys) == 0 {
		if !loopbackListen(addr) {
			return opts, fmt.Errorf("the API listens on %s with no API keys: give --api-keys FILE or %s", addr, api.KeysEnv)
		}
		log.Warn("no API keys: the API is open to local clients (give --api-keys or " + api.KeysEnv + ")")
		opts.NoAuth = true
	}
	return opts, nil
}
