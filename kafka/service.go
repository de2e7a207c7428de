package kafka

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/internal/gctune"
	"github.com/vigil-cep/vigil/kafka/kconf"
	"github.com/vigil-cep/vigil/rules"
	"github.com/vigil-cep/vigil/state"
	"github.com/vigil-cep/vigil/telemetry"
)

// Config configures a Service. Zero values take the defaults of
// DefaultConfig.
type Config struct {
	Kafka              kconf.Config  // how to reach the cluster: brokers, TLS, SASL (every client of the service uses it)
	Group              string        // consumer group of the tasks
	InstanceID         string        // static group membership; "" derives one from the host and DataDir
	Topics             Topics        // output and rules topic names
	Partitions         int32         // partitions of topics Vigil creates
	CheckpointInterval time.Duration // how often each task checkpoints
	CheckpointKeep     int           // checkpoint chains kept per task
	// CheckpointBaseEvery is how many deltas a task's checkpoint chain
	// takes before they are merged into a new base (checkpoint.go): it
	// bounds what a restore reads.
	CheckpointBaseEvery int
	// CheckpointMaxChanges is how many changes (keys changed, changes to
	// ids) a task lets pile up before it checkpoints, whatever the
	// interval: the tracking of each takes about a hundred bytes until a
	// cut takes it, and with checkpoints an hour apart a task at 1M users
	// held half a gigabyte more, which the collector marked at every cycle
	// (docs/performance.md).
	CheckpointMaxChanges int
	Checkpoints          string // the store: CheckpointsDir (default) or CheckpointsKafka
	// FreezeIdle is how long a key goes unchanged (at most twice it)
	// before its task keeps it as its checkpoint record, which the
	// collector does not scan, until it is next used (cool.go); 0 takes
	// the default, a negative duration never freezes a key (a restore still
	// leaves every key so until it is used: engine.Task.Restore).
	FreezeIdle time.Duration
	// Delivery is AtLeastOnce (the default) or ExactlyOnce, which needs
	// the Kafka store: each checkpoint is committed in one transaction
	// with the outputs before it (txn.go). Under ExactlyOnce a zero
	// CheckpointInterval or CheckpointBaseEvery takes ExactlyOnceDefaults,
	// and an empty Checkpoints the Kafka store.
	Delivery           string
	SessionTimeout     time.Duration // how long the group waits for a silent member before moving its partitions
	DataDir            string        // checkpoints live under DataDir/checkpoints
	QueueBatches       int           // fetched batches a task may have queued before its partitions pause
	MaxBufferedRecords int           // produced records not yet acknowledged, per process
	Linger             time.Duration // producer linger: 0 sends at once (lowest latency)
	FetchMaxWait       time.Duration // how long the broker may hold a fetch with no data
	FetchMinBytes      int32         // what a fetch waits for, up to FetchMaxWait: 1 answers with the first record
	MaxRecordBytes     int           // larger input records go to the DLQ
	APIQueue           int           // decision API requests queued per task before 429
	ShutdownTimeout    time.Duration // bound on the final drain and checkpoint
	RuleTimeLimit      time.Duration // a rule evaluation running longer is stopped and its rule quarantined (guard.go)
	AdvertiseHTTP      string        // the address peers reach this instance's API at (routing.go); "": none
	RouteWait          time.Duration // how long a request waits for its partition's owner during a rebalance
	Logger             *slog.Logger
	Metrics            *telemetry.Metrics   // nil: no metrics
	Lookups            engine.LookupFactory // the lookups of the ruleset's enrichments (Redis, HTTP)
}

// DefaultConfig holds the low-latency defaults (docs/design.md "Backpressure");
// the README lists which knobs trade latency for throughput.
var DefaultConfig = Config{
	Group:                "vigil",
	Topics:               DefaultTopics,
	Partitions:           4,
	CheckpointInterval:   10 * time.Second,
	CheckpointKeep:       state.DefaultKeep,
	CheckpointBaseEvery:  20,
	CheckpointMaxChanges: 1 << 19,
	Checkpoints:          CheckpointsDir,
	FreezeIdle:           30 * time.Second,
	Delivery:             AtLeastOnce,
	SessionTimeout:       10 * time.Second,
	DataDir:              "vigil-data",
	QueueBatches:         4,
	MaxBufferedRecords:   100_000,
	Linger:               0,
	FetchMaxWait:         50 * time.Millisecond,
	FetchMinBytes:        1,
	MaxRecordBytes:       1 << 20,
	APIQueue:             1024,
	ShutdownTimeout:      30 * time.Second,
	RuleTimeLimit:        time.Second,
	RouteWait:            DefaultRouteWait,
}

func (c *Config) fillDefaults() {
	d := DefaultConfig
	if c.Delivery == "" {
		c.Delivery = d.Delivery
	}
	if c.Group == "" {
		c.Group = d.Group
	}
	t := &c.Topics
	for _, f := range []struct {
		dst *string
		def string
	}{
		{&t.Decisions, d.Topics.Decisions}, {&t.Alerts, d.Topics.Alerts}, {&t.Joins, d.Topics.Joins},
		{&t.Windows, d.Topics.Windows}, {&t.Late, d.Topics.Late}, {&t.DLQ, d.Topics.DLQ}, {&t.Rules, d.Topics.Rules},
		{&t.Checkpoints, d.Topics.Checkpoints},
	} {
		if *f.dst == "" {
			*f.dst = f.def
		}
	}
	if c.Partitions <= 0 {
		c.Partitions = d.Partitions
	}
	if c.CheckpointMaxChanges <= 0 {
		c.CheckpointMaxChanges = d.CheckpointMaxChanges
	}
	if c.Delivery == ExactlyOnce {
		d.CheckpointInterval, d.CheckpointBaseEvery = ExactlyOnceDefaults.CheckpointInterval, ExactlyOnceDefaults.CheckpointBaseEvery
		d.Checkpoints = CheckpointsKafka // the checkpoint is written in the transaction
	}
	if c.CheckpointBaseEvery <= 0 {
		c.CheckpointBaseEvery = d.CheckpointBaseEvery
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = d.CheckpointInterval
	}
	if c.CheckpointKeep <= 0 {
		c.CheckpointKeep = d.CheckpointKeep
	}
	if c.FreezeIdle == 0 {
		c.FreezeIdle = d.FreezeIdle
	}
	if c.Checkpoints == "" {
		c.Checkpoints = d.Checkpoints
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = d.SessionTimeout
	}
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if c.QueueBatches <= 0 {
		c.QueueBatches = d.QueueBatches
	}
	if c.MaxBufferedRecords <= 0 {
		c.MaxBufferedRecords = d.MaxBufferedRecords
	}
	if c.FetchMaxWait <= 0 {
		c.FetchMaxWait = d.FetchMaxWait
	}
	if c.FetchMinBytes <= 0 {
		c.FetchMinBytes = d.FetchMinBytes
	}
	if c.APIQueue <= 0 {
		c.APIQueue = d.APIQueue
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = d.MaxRecordBytes
	}
	if c.RouteWait <= 0 {
		c.RouteWait = d.RouteWait
	}
	if c.RuleTimeLimit <= 0 {
		c.RuleTimeLimit = d.RuleTimeLimit
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = d.ShutdownTimeout
	}
	if c.InstanceID == "" {
		c.InstanceID = defaultInstanceID(c.DataDir)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Service runs a ruleset over Kafka: one task per co-partition (partition p
// of every input topic), each on its own goroutine, owning its keys' state,
// checkpointing it with its input offsets, and writing its outputs to the
// output topics (docs/design.md "Architecture", "Delivery").
type Service struct {
	cfg    Config
	kopts  []kgo.Opt // the connection options of every client (cfg.Kafka.Opts)
	owners *ownerMap // which instance owns each partition (routing.go)
	counts map[string]int32
	cl     *kgo.Client
	adm    *kadm.Client
	ckpt   state.Backend
	// txnStore is ckpt under exactly-once, where tasks save their
	// checkpoints in their transactions (CheckpointStore.SaveIn).
	txnStore *CheckpointStore
	log      *slog.Logger

	mu     sync.Mutex
	rs     *rules.Ruleset // the running version; tasks switch to it between events
	inputs []string
	tasks  map[int32]*task
	ids    *engine.IDIndex // the ids the tasks remember, to refuse one for another key (engine.IDIndex)
	pace   *pacer          // how much of the time the tasks' background slices take (pace.go)

	joined     atomic.Bool           // the group has assigned partitions once
	stopping   atomic.Bool           // Run is draining its tasks: requests find no task
	extractors chan *pooledExtractor // for the decision API
	failed     atomic.Pointer[error] // the first fatal error (failWith)
	lagMu      sync.Mutex
	lag        map[topicPartition]int64 // records behind the high watermark, as of the last fetch
	rulesLog   *rulesLog                // the accepted versions, followed by watchRules
	rulesCl    *kgo.Client              // proposes versions (Publish)
	publishMu  sync.Mutex
	// stuck describes a task stuck in a rule, for Ready; nil when none
	// (the watchdog, guard.go). quarantines are the rules to disable.
	stuck       atomic.Pointer[string]
	quarantines struct {
		mu      sync.Mutex
		pending map[string]bool // rule names, until a version disables them
		signal  chan struct{}   // capacity 1: something is pending
	}
}

// New connects to the brokers, creates missing topics, and loads the ruleset:
// the latest version on the rules topic, or seed when that topic is empty
// (seed is then published there as version 1). seedExplicit says the user
// named seed (a note is logged when the topic holds another document).
func New(ctx context.Context, cfg Config, seed []byte, seedExplicit bool) (*Service, error) {
	cfg.fillDefaults()
	switch {
	case cfg.Delivery != AtLeastOnce && cfg.Delivery != ExactlyOnce:
		return nil, fmt.Errorf("delivery %q: want %s or %s", cfg.Delivery, AtLeastOnce, ExactlyOnce)
	case cfg.Delivery == ExactlyOnce && cfg.Checkpoints != CheckpointsKafka:
		return nil, fmt.Errorf("delivery %s needs the %s checkpoint store, not %q: a checkpoint is committed in the transaction of the outputs before it",
			ExactlyOnce, CheckpointsKafka, cfg.Checkpoints)
	}
	kopts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	// One request first, so that a wrong password or an untrusted CA is one
	// clear error now, not clients retrying in the background.
	if err := cfg.Kafka.Check(ctx, kopts); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, kopts: kopts, owners: newOwnerMap(), log: cfg.Logger, tasks: make(map[int32]*task), ids: engine.NewIDIndex(), pace: newPacer(),
		lag: make(map[topicPartition]int64), extractors: make(chan *pooledExtractor, 64)}
	s.quarantines.pending, s.quarantines.signal = map[string]bool{}, make(chan struct{}, 1)
	// Topics are created and then looked up at once: a short metadata age
	// keeps the client from serving the "unknown topic" it cached before.
	admCl, err := s.client(kgo.MetadataMinAge(100 * time.Millisecond))
	if err != nil {
		return nil, err
	}
	s.adm = kadm.NewClient(admCl)
	rs, err := s.loadRules(ctx, seed, seedExplicit)
	if err != nil {
		s.adm.Close()
		return nil, err
	}
	if len(InputTopics(rs)) == 0 {
		s.adm.Close()
		return nil, errors.New("the ruleset has no input stream with a topic")
	}
	if s.counts, err = ensureTopics(ctx, s.adm, InputTopics(rs), cfg.Topics, cfg.Partitions); err != nil {
		s.adm.Close()
		return nil, err
	}
	s.setRuleset(rs)
	if s.ckpt, err = s.openCheckpoints(ctx); err != nil {
		s.adm.Close()
		return nil, err
	}
	if cfg.Delivery == ExactlyOnce {
		s.txnStore = s.ckpt.(*CheckpointStore)
	}
	return s, nil
}

// client opens a Kafka client with the service's connection options
// (brokers, TLS, SASL) and extra.
func (s *Service) client(extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(slices.Clip(s.kopts), extra...)...)
}

// Checkpoint stores (Config.Checkpoints).
const (
	CheckpointsDir   = "dir"   // files under DataDir: fast; a task's state stays on this machine
	CheckpointsKafka = "kafka" // a topic: any process of the group can restore any task
)

func (s *Service) openCheckpoints(ctx context.Context) (state.Backend, error) {
	onCorrupt := func(where string, err error) {
		s.log.Warn("corrupt checkpoint skipped; using the previous one", "where", where, "err", err)
	}
	switch s.cfg.Checkpoints {
	case CheckpointsDir:
		return state.OpenDir(filepath.Join(s.cfg.DataDir, "checkpoints"), state.Keep(s.cfg.CheckpointKeep),
			state.OnCorrupt(onCorrupt))
	case CheckpointsKafka:
		// One partition per task: as many as the input topics have.
		var parts int32
		for _, in := range s.inputs {
			parts = max(parts, s.counts[in])
		}
		return NewCheckpointStore(ctx, s.cfg.Kafka.Brokers, s.cfg.Topics.Checkpoints, parts,
			CheckpointStoreConfig{Keep: s.cfg.CheckpointKeep, OnCorrupt: onCorrupt, ClientOpts: s.kopts})
	}
	return nil, fmt.Errorf("checkpoints: %q is not a store (dir or kafka)", s.cfg.Checkpoints)
}

// loadRules reads the rules topic's history; an empty topic is seeded.
func (s *Service) loadRules(ctx context.Context, seed []byte, seedExplicit bool) (*rules.Ruleset, error) {
	topic := s.cfg.Topics.Rules
	cl, err := s.client(rulesProducerOpts()...)
	if err != nil {
		return nil, err
	}
	s.rulesCl = cl
	l, err := readRulesLog(ctx, s.kopts, s.adm, topic, s.loadOptions()...)
	if err != nil {
		return nil, err
	}
	if l.current() == nil {
		if seed == nil {
			return nil, fmt.Errorf("no ruleset: %s is empty; pass --rules FILE to seed it", topic)
		}
		v, err := pushRules(ctx, s.kopts, topic, seed, 0, "vigil serve", "seeded from --rules")
		switch {
		case errors.Is(err, service.ErrVersionConflict): // another instance seeded it first: run that
		case err != nil:
			return nil, err
		default:
			s.log.Info("seeded the rules topic", "topic", topic, "version", v.Number, "digest", v.Digest)
		}
		if l, err = readRulesLog(ctx, s.kopts, s.adm, topic, s.loadOptions()...); err != nil {
			return nil, err
		}
	} else if seedExplicit && l.current().Document != string(seed) {
		s.log.Info("the rules topic holds a ruleset already; --rules only seeds an empty topic (use `vigil rules push`)",
			"topic", topic, "version", l.current().Number)
	}
	s.rulesLog = l
	return l.current().rs, nil
}

// Close releases the clients of a Service whose Run was never called (Run
// releases them itself).
func (s *Service) Close() {
	s.adm.Close()
	if s.rulesCl != nil {
		s.rulesCl.Close()
	}
}

// Ruleset returns the ruleset version the tasks run (or are switching to).
func (s *Service) Ruleset() *rules.Ruleset {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rs
}

// setRuleset makes rs the running version: every task switches to it before
// its next event.
func (s *Service) setRuleset(rs *rules.Ruleset) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rs = rs
	s.inputs = InputTopics(rs)
	for _, t := range s.tasks {
		t.switchTo(rs)
	}
}

// Run consumes until ctx is done, then stops every task (drain, final
// checkpoint, commit) within the shutdown timeout. It returns nil after a
// clean stop, or the first fatal error.
func (s *Service) Run(ctx context.Context) error {
	defer s.adm.Close()
	defer s.rulesCl.Close()
	rs := s.Ruleset()
	inputs := InputTopics(rs)
	opts := []kgo.Opt{
		kgo.ConsumerGroup(s.cfg.Group),
		// Static membership (KIP-345): a process restarted after a crash
		// takes its old place, and partitions, at once, instead of waiting
		// for the group to time the dead member out.
		kgo.InstanceID(s.cfg.InstanceID),
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		kgo.ConsumeTopics(inputs...),
		// Range assigns partition p of every topic to the same member when
		// the topics have equal partition counts: co-partitions stay together.
		// It also advertises this instance's API address (routing.go).
		kgo.Balancers(newAdvertisingBalancer(kgo.RangeBalancer(), s.cfg.AdvertiseHTTP)),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AdjustFetchOffsetsFn(s.assign),
		kgo.OnPartitionsRevoked(s.revoke),
		kgo.OnPartitionsLost(s.revoke),
		kgo.FetchMaxWait(s.cfg.FetchMaxWait),
		kgo.FetchMinBytes(s.cfg.FetchMinBytes),
		// A fetch's bytes sit in memory until its task takes them: keep it
		// to a few MiB (the default is 50 MiB) so that pausing bounds memory.
		kgo.FetchMaxBytes(4 << 20),
		kgo.FetchMaxPartitionBytes(1 << 20),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(s.cfg.MaxBufferedRecords),
		kgo.ProducerLinger(s.cfg.Linger),
		kgo.RecordDeliveryTimeout(0),
	}
	if s.cfg.Delivery == ExactlyOnce {
		// Records of transactions not committed, or aborted, are not
		// input: the decision API's own events among them.
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := s.client(opts...)
	if err != nil {
		return err
	}
	s.cl = cl
	s.log.Info("consuming", "topics", inputs, "group", s.cfg.Group, "ruleset", rs.Version, "delivery", s.cfg.Delivery)

	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); s.watchRules(watchCtx) }()
	owned := make(chan struct{})
	go func() { defer close(owned); s.watchOwners(watchCtx) }()
	defer func() { <-owned }()
	// The watchdog outlives the poll loop: it must stop a slow rule during
	// the final drain too, so that a shutdown ends in time.
	guardCtx, stopGuard := context.WithCancel(context.Background())
	var guards sync.WaitGroup
	guards.Go(func() { s.watch(guardCtx) })
	guards.Go(func() { s.quarantiner(watchCtx) })
	defer func() { stopGuard(); guards.Wait() }()
	unobserve := s.observeMetrics()
	defer unobserve()
	runErr := s.poll(ctx)
	stopWatch()
	<-watched

	// Stop the tasks ourselves rather than through a revoke, so that their
	// final checkpoints and commits run before the client leaves the group.
	s.stopping.Store(true) // requests from now on are answered 503 at once (local)
	stopping := time.Now()
	n := len(s.taskList())
	s.log.Info("stopping: draining the tasks, final checkpoints and commits", "tasks", n, "timeout", s.cfg.ShutdownTimeout)
	stop, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	// A final checkpoint that failed (an output the broker refused) is
	// the run's error: nothing is lost, the next start replays from the
	// checkpoint before, but the exit status must not say all went well.
	runErr = errors.Join(runErr, s.stopTasks(stop, nil))
	defer func() {
		s.log.Info("stopped", "tasks", n, "took", time.Since(stopping).Round(time.Millisecond), "err", runErr)
	}()
	done := make(chan struct{})
	go func() { cl.Close(); close(done) }()
	select {
	case <-done:
	case <-stop.Done():
		runErr = errors.Join(runErr, errors.New("shutdown timed out"))
	}
	return runErr
}

// poll fetches records and hands each partition's batch to its task. A task
// whose queue is full has its partitions paused until it has drained half
// of it: memory stays bounded and other tasks keep going.
func (s *Service) poll(ctx context.Context) error {
	paused := make(map[int32]time.Time) // task -> when its partitions paused
	// Batches fetched for a task whose queue was full: held here (the
	// task's partitions are paused, so this is at most one fetch's worth)
	// while the other tasks go on.
	held := make(map[*task][]*batch)
	pause := time.NewTimer(time.Hour)
	defer pause.Stop()
	for {
		if err := s.failed.Load(); err != nil {
			return *err
		}
		if ctx.Err() != nil {
			return nil
		}
		s.deliverHeld(held)
		s.resumeDrained(paused, held)
		wait := 200 * time.Millisecond
		if len(held) > 0 {
			wait = 5 * time.Millisecond // come back soon for the held batches
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := s.cl.PollRecords(pctx, 10_000)
		cancel()
		if fs.IsClientClosed() {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		own := onlyAPI(fs)
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) == 0 {
				return
			}
			s.setLag(ftp.Topic, ftp.Partition, ftp.HighWatermark-ftp.Records[len(ftp.Records)-1].Offset-1)
			t := s.task(ftp.Partition)
			if t == nil {
				return // revoked meanwhile: the next owner reads it from its checkpoint
			}
			b := &batch{topic: ftp.Topic, records: ftp.Records}
			if len(held[t]) == 0 {
				select {
				case t.in <- b:
					return
				default:
				}
			}
			// Full: pause this task's partitions and hold the batch.
			held[t] = append(held[t], b)
			if _, ok := paused[t.part]; !ok {
				paused[t.part] = time.Now()
				s.cl.PauseFetchPartitions(s.partitionsOf(t.part))
			}
		})
		if own {
			// Events the tasks decided already (Decide), fetched back:
			// taking the next fetch a moment later lets it carry more of
			// them (see ownPollPause).
			pause.Reset(ownPollPause)
			select {
			case <-ctx.Done():
			case <-pause.C:
			}
		}
	}
}

// ownPollPause is how long poll waits before it takes the next fetch when
// the last one held only the decision API's own events. Under API load the
// consumer would otherwise fetch each event back alone, or nearly: at 5,000
// decisions/s, 0.3 to 0.45 fetches per decision, each costing the broker
// and the client more than the record it carries. A millisecond's wait
// makes them about half as many (0.15 per decision; 2 ms made them a fifth,
// for the same CPU) and takes 3-10% off the CPU of a decision and a sixth
// off its allocation (docs/performance.md). The API's answers never wait
// for it, and a record from another producer waits at most this long, only
// while the API's events are all the input there is.
const ownPollPause = time.Millisecond

// onlyAPI reports whether fs holds records, all written by the decision API.
func onlyAPI(fs kgo.Fetches) bool {
	if fs.Empty() {
		return false
	}
	for r := range fs.RecordsAll() {
		if !fromAPI(r) {
			return false
		}
	}
	return true
}

// deliverHeld hands held batches to their tasks, in order, as far as their
// queues take them; batches of a task that stopped are dropped (its next
// owner reads them from its checkpoint's offsets).
func (s *Service) deliverHeld(held map[*task][]*batch) {
	for t, bs := range held {
		for len(bs) > 0 {
			select {
			case <-t.quit:
				bs = nil
				continue
			case t.in <- bs[0]:
				bs[0] = nil
				bs = bs[1:]
				continue
			default:
			}
			break
		}
		if len(bs) == 0 {
			delete(held, t)
		} else {
			held[t] = bs
		}
	}
}

func (s *Service) resumeDrained(paused map[int32]time.Time, held map[*task][]*batch) {
	for p, since := range paused {
		t := s.task(p)
		if t == nil || len(held[t]) == 0 && len(t.in) <= cap(t.in)/2 {
			delete(paused, p)
			s.cl.ResumeFetchPartitions(s.partitionsOf(p))
			s.cfg.Metrics.Backpressure(p, time.Since(since))
		}
	}
}

func (s *Service) partitionsOf(p int32) map[string][]int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string][]int32, len(s.inputs))
	for _, in := range s.inputs {
		m[in] = []int32{p}
	}
	return m
}

// assign starts the tasks of newly assigned partitions: each restores its
// latest checkpoint, and its partitions are read from the checkpoint's
// offsets (the group's committed offsets can lag the checkpoint, or run ahead
// of it when the newest checkpoint was torn; the checkpoint is what the state
// matches).
func (s *Service) assign(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	defer s.joined.Store(true)
	defer s.owners.poke()
	var parts []int32
	for _, ps := range offsets {
		for p := range ps {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	var start []int32
	s.mu.Lock()
	for _, p := range parts {
		if _, running := s.tasks[p]; !running {
			start = append(start, p)
		}
	}
	s.mu.Unlock()
	// The tasks restore in parallel: each reads its own checkpoint and
	// decisions (the stores are safe for concurrent use by different
	// tasks), and a process's restore takes about as long as its largest
	// task's rather than the sum (docs/design.md "Delivery").
	// In two halves: every task reads its chain, then every task decodes
	// it. Between them one collection, when the reads left more garbage
	// than it must mark, frees it for the decodes to reuse
	// (gctune.Reads.Reclaim). The decodes run with the collector off: they
	// allocate the state they restore, which all stays live, and cycles
	// meanwhile would only mark a growing heap (gctune.Pause; the soft
	// memory limit still holds).
	started := make([]*task, len(start))
	chains := make([][]*state.Snapshot, len(start))
	errs := make([]error, len(start))
	reads := gctune.StartReads()
	var wg sync.WaitGroup
	for i, p := range start {
		wg.Go(func() { started[i], chains[i], errs[i] = s.loadTask(ctx, p) })
	}
	wg.Wait()
	reads.Reclaim(chainBytes(chains))
	resume := gctune.Pause()
	for i, t := range started {
		if t != nil {
			wg.Go(func() {
				if errs[i] = t.launch(ctx, chains[i]); errs[i] != nil {
					started[i] = nil
				}
				chains[i] = nil // decoded: garbage once the collector runs again
			})
		}
	}
	wg.Wait()
	resume()
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("task %d: %w", start[i], err)
		}
	}
	for i, t := range started {
		if t == nil {
			continue
		}
		p := start[i]
		for _, in := range InputTopics(t.rs) {
			if off, ok := t.next[in]; ok {
				if offsets[in] == nil {
					offsets[in] = make(map[int32]kgo.Offset)
				}
				offsets[in][p] = kgo.NewOffset().At(off).WithEpoch(-1)
			}
		}
		s.mu.Lock()
		s.tasks[p] = t // also when another failed: Run stops it with the others
		if t.rs != s.rs {
			t.switchTo(s.rs) // a version published while the task was starting
		}
		s.mu.Unlock()
		s.log.Info("task started", "task", p, "restored", t.restored, "offsets", t.next)
		if !t.restored {
			s.warnStateless(p, offsets)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.failWith(err)
		return offsets, err
	}
	return offsets, nil
}

// chainBytes returns the size of the snapshots of chains.
func chainBytes(chains [][]*state.Snapshot) int64 {
	var n int64
	for _, chain := range chains {
		for _, snap := range chain {
			for _, b := range snap.Sections {
				n += int64(len(b))
			}
		}
	}
	return n
}

// warnStateless says so when task p starts without a checkpoint from offsets
// the group committed: the events before them are not in its state. That is
// what a checkpoint store the group never wrote to gives (a new data
// directory, or --checkpoints changed, which exactly-once's Kafka store
// needs): checkpoints do not move between stores.
func (s *Service) warnStateless(p int32, offsets map[string]map[int32]kgo.Offset) {
	committed := map[string]int64{}
	for in, ps := range offsets {
		if off, ok := ps[p]; ok {
			if at := off.EpochOffset().Offset; at > 0 {
				committed[in] = at
			}
		}
	}
	if len(committed) > 0 {
		s.log.Warn("task starts without state from the group's committed offsets: its checkpoint store holds no checkpoint of it",
			"task", p, "checkpoints", s.cfg.Checkpoints, "offsets", committed)
	}
}

// revoke stops the tasks of revoked (or lost) partitions: each finishes the
// batch in hand, checkpoints and commits before the partitions go.
func (s *Service) revoke(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	defer s.owners.poke()
	parts := make(map[int32]bool)
	for _, ps := range lost {
		for _, p := range ps {
			parts[p] = true
		}
	}
	// A task whose final checkpoint fails hands on its previous one: its
	// next owner replays from there, so the error is logged, not fatal.
	// The wait is bounded as a shutdown's is: franz-go's context lasts as
	// long as the client, and a save whose outputs the broker never
	// acknowledges would hold this member out of the group for good
	// (franz-go waits for this callback before it rejoins).
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	_ = s.stopTasks(ctx, parts)
}

// stopTasks stops the given tasks (all when parts is nil) in parallel, and
// returns their errors (each also logged).
func (s *Service) stopTasks(ctx context.Context, parts map[int32]bool) error {
	s.mu.Lock()
	var stop []*task
	for p, t := range s.tasks {
		if parts == nil || parts[p] {
			stop = append(stop, t)
			delete(s.tasks, p)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(stop))
	for i, t := range stop {
		wg.Go(func() {
			if err := t.stop(ctx); err != nil {
				s.log.Error("task stop", "task", t.part, "err", err)
				errs[i] = fmt.Errorf("task %d: %w", t.part, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// failWith records a task's fatal error (an output not acknowledged, a
// checkpoint not saved): Run returns it, and Ready reports it.
func (s *Service) failWith(err error) { s.failed.CompareAndSwap(nil, &err) }

// defaultInstanceID names this process in the group: the host and the data
// directory, which stay the same across restarts (a StatefulSet pod keeps
// both) and differ between two processes on one machine.
func defaultInstanceID(dataDir string) string {
	host, _ := os.Hostname()
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return fmt.Sprintf("vigil-%s-%x", host, sum[:4])
}

type topicPartition struct {
	topic string
	part  int32
}

func (s *Service) setLag(topic string, part int32, lag int64) {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	s.lag[topicPartition{topic, part}] = max(lag, 0)
}

// observeMetrics registers the gauges read at scrape time: each task's
// watermark and event-time lag, and the consumer lag per partition.
func (s *Service) observeMetrics() (unregister func()) {
	m := s.cfg.Metrics
	if m == nil {
		return func() {}
	}
	u1, err1 := m.ObserveTasks(func(observe func(task int32, watermark, lagMillis int64)) {
		now := time.Now().UnixMilli()
		for _, t := range s.taskList() {
			wm := t.watermark.Load()
			observe(t.part, wm, now-wm)
		}
	})
	u2, err2 := m.ObserveConsumerLag(func(observe func(topic string, partition int32, lag int64)) {
		s.lagMu.Lock()
		defer s.lagMu.Unlock()
		for tp, lag := range s.lag {
			observe(tp.topic, tp.part, lag)
		}
	})
	if err := errors.Join(err1, err2); err != nil {
		s.log.Warn("metrics gauges", "err", err)
	}
	return func() {
		if u1 != nil {
			u1()
		}
		if u2 != nil {
			u2()
		}
	}
}
