package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/examples"
	"github.com/vigil-cep/vigil/internal/cli"
	"github.com/vigil-cep/vigil/internal/gctune"
	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
	"github.com/vigil-cep/vigil/replay"
	"github.com/vigil-cep/vigil/rules"
)

// `vigil-bench bench` measures, in one process, on one embedded broker and one
// workload:
//
//  1. the Kafka pass-through ceiling: a bare franz-go client, configured as
//     the service's (group, fetch wait, linger 0, manual partitioning),
//     consuming the input topics and producing every record unchanged;
//  2. `vigil replay` on the same events, in memory, output discarded;
//  3. the Vigil service over Kafka on the same input topics, already filled
//     (each partition ends with a marker record the service sends to the
//     DLQ, which shows when that partition was processed to its end), at
//     least once and exactly once (deliveryConfig): issue 19 asks for
//     exactly-once's throughput as a ratio of at-least-once's;
//  4. event-to-decision latency at a fixed input rate, on fresh topics, at
//     least once and exactly once at each commit interval offered: under
//     exactly-once a decision is visible only when its transaction commits.
//
// Every figure stops its clock when the decisions are visible to a
// read_committed consumer, which under at-least-once is when the broker has
// them. Every phase is bounded by --timeout and says so when it runs out.

// benchConfig holds the flags of `vigil-bench bench`.
type benchConfig struct {
	events, users, partitions int
	runs                      int
	seed                      uint64
	rate                      float64
	latencyDuration           time.Duration
	timeout                   time.Duration
	jsonOut, verbose          bool
	secure                    bool
	cpuProfile, profilePhase  string
	prof                      *cpuProfiler
	// Phases 3 and 4 (deliveryConfig): the deliveries they run, the
	// exactly-once commit intervals, and at-least-once's checkpoint store.
	deliveries      []string
	commitIntervals []time.Duration
	checkpoints     string
}

// cpuProfiler records the CPU profile of one phase, from the moment its
// clock starts to the moment it stops (so a service's start-up before Run
// and its shutdown after the clock are not in it). A phase that runs several
// times (--runs, a latency configuration per commit interval) is recorded
// in its first run: a file holds one profile.
type cpuProfiler struct {
	phase         string
	f             *os.File
	running, done bool
	err           error
}

func (p *cpuProfiler) begin(phase string) {
	if p == nil || p.f == nil || p.phase != phase || p.running || p.done {
		return
	}
	if p.err = pprof.StartCPUProfile(p.f); p.err == nil {
		p.running, p.done = true, true
	}
}

func (p *cpuProfiler) end(phase string) {
	if p == nil || !p.running || p.phase != phase {
		return
	}
	pprof.StopCPUProfile()
	p.running = false
}

// close ends the profile and closes its file.
func (p *cpuProfiler) close() error {
	if p == nil || p.f == nil {
		return nil
	}
	if p.running {
		pprof.StopCPUProfile()
		p.running = false
	}
	err := p.f.Close()
	p.f = nil
	return errors.Join(p.err, err)
}

// Phase names, as --profile-phase takes them.
const (
	phasePassthrough = "passthrough"
	phaseReplay      = "replay"
	phaseKafka       = "kafka"
	phaseLatency     = "latency"
)

var phaseTitles = map[string]string{
	phasePassthrough: "phase 1 (Kafka pass-through ceiling)",
	phaseReplay:      "phase 2 (vigil replay)",
	phaseKafka:       "phase 3 (Vigil over Kafka)",
	phaseLatency:     "phase 4 (event-to-decision latency)",
}

// profilePhases are the values of --profile-phase: the phases, and phases 3
// and 4 under exactly-once (profileKey).
var profilePhases = []string{phasePassthrough, phaseReplay, phaseKafka, phaseKafka + "-" + kafka.ExactlyOnce,
	phaseLatency, phaseLatency + "-" + kafka.ExactlyOnce}

// benchResult is what `vigil-bench bench --json` prints.
type benchResult struct {
	Workload    benchWorkload     `json:"workload"`
	Broker      string            `json:"broker"`
	Security    string            `json:"security"` // the broker's: "none" or "SASL_SSL SCRAM-SHA-512"
	GOMAXPROCS  int               `json:"gomaxprocs"`
	Load        benchThroughput   `json:"load"`
	EndMarkers  int               `json:"end_markers"` // records appended after the workload, one per input partition
	Passthrough *benchPassthrough `json:"passthrough"`
	Replay      *benchReplay      `json:"replay"`      // the median run of phase 2
	VigilKafka  *benchKafka       `json:"vigil_kafka"` // the median at-least-once run of phase 3
	// ReplayRuns and KafkaRuns are the events/s of every run of phases 2
	// and 3 (at-least-once), in order (--runs alternates them).
	ReplayRuns []float64 `json:"replay_runs"`
	KafkaRuns  []float64 `json:"kafka_runs"`
	// VigilKafkaExactlyOnce and KafkaRunsExactlyOnce are phase 3's median
	// run and every run's events/s under exactly-once, and
	// ExactlyOnceRatio their ratio to at-least-once's (nil unless both
	// deliveries ran).
	VigilKafkaExactlyOnce *benchKafka   `json:"vigil_kafka_exactly_once"`
	KafkaRunsExactlyOnce  []float64     `json:"kafka_runs_exactly_once"`
	ExactlyOnceRatio      *benchRatio   `json:"exactly_once_ratio"`
	Latency               *benchLatency `json:"latency"` // phase 4 at least once
	// Latencies holds phase 4 under every configuration, in the order run:
	// at-least-once (Latency again), exactly-once at each commit interval.
	Latencies []*benchLatency `json:"latencies"`
	Error     string          `json:"error,omitempty"`
}

type benchWorkload struct {
	Events         int    `json:"events"`
	Users          int    `json:"users"`
	Seed           uint64 `json:"seed"`
	Partitions     int    `json:"partitions"`
	Transactions   int    `json:"transactions"`    // transaction records, duplicates included
	TransactionIDs int    `json:"transaction_ids"` // distinct tx_id
	Logins         int    `json:"logins"`
	Devices        int    `json:"devices"`
	Bytes          int    `json:"bytes"` // record values
}

// benchThroughput is a timed run over a number of events.
type benchThroughput struct {
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
}

type benchPassthrough struct {
	benchThroughput
	Produced int `json:"produced"` // records acknowledged on the output topic: events + end markers
}

type benchReplay struct {
	benchThroughput
	Decisions int64 `json:"decisions"`
	GOGC      int   `json:"gogc"`
}

type benchKafka struct {
	benchThroughput
	benchDelivery
	Decisions       int     `json:"decisions"`         // decision records read back read_committed: one per transaction record
	DecisionIDs     int     `json:"decision_ids"`      // distinct ids among them
	EndMarkers      int     `json:"end_markers"`       // input partitions whose end marker the service reached (sent to the DLQ)
	ProcessedAtStop int64   `json:"processed_at_stop"` // input offsets the service committed when stopped: events + end markers
	FirstDecisionMs float64 `json:"first_decision_ms"` // from Run to the first decision's record timestamp (its Produce call, ms precision): start-up
	// FirstVisibleMs is from Run to the first poll of the decisions
	// topic's last stable offsets that saw a decision: start-up, and under
	// exactly-once the first commit.
	FirstVisibleMs  float64 `json:"first_visible_ms"`
	PercentOfReplay float64 `json:"percent_of_replay"`
	GOGC            int     `json:"gogc"`
}

type benchLatency struct {
	benchDelivery
	Rate            float64 `json:"rate"`             // target events/s
	DurationSeconds float64 `json:"duration_seconds"` // target duration
	Users           int     `json:"users"`
	Events          int     `json:"events"`
	Transactions    int     `json:"transactions"`
	TransactionIDs  int     `json:"transaction_ids"`
	Decided         int     `json:"decided"`       // transaction ids with a decision
	AchievedRate    float64 `json:"achieved_rate"` // events / time from the first to the last produce call
	MaxBehindMs     float64 `json:"max_behind_ms"` // how far the producer fell behind its schedule
	// Decision visible to a read_committed consumer minus produce call.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	GOGC  int     `json:"gogc"`
}

const benchSynopsis = `bench [--events N] [--users N] [--partitions P] [--runs N] [--delivery D,...] [--commit-intervals I,...] [--rate R] [--latency-duration D] [--json]

Starts an embedded broker (127.0.0.1, a free port, data in a temporary
directory), generates one workload (as vigil gen --partitions P), produces it
to the example ruleset's input topics, then measures:
  1. Kafka pass-through ceiling: a bare franz-go client with the service's
     settings joins a group, reads the input topics and produces every record
     unchanged; clock from client creation to the last acknowledgement.
  2. vigil replay: replay.Run over the same events in memory, output
     discarded; the collector as vigil serve sets it, unless GOGC is set
     (vigil replay itself runs at GOGC 800): the ratio of (3) to (2) is the
     Kafka layer's cost, not a difference of collector settings.
  3. Vigil over Kafka: in every run, a service per --delivery (each on a
     fresh group, output topics and data directory; their order alternates
     from run to run) on the filled topics, DefaultConfig but for:
       at-least-once: checkpoints every 10s (DefaultConfig's) to the
         --checkpoints store: kafka by default, vigil serve's with --brokers;
       exactly-once: outputs written in a Kafka transaction per checkpoint,
         committed with it; a checkpoint every first --commit-intervals,
         a base every 600 (vigil serve's exactly-once defaults); the kafka
         store, which exactly-once needs.
     So the two differ by the delivery and the checkpoint interval vigil
     serve gives it. Clock from Run to the moment the decisions topic's last
     stable offsets (what a read_committed consumer may read; polled every
     5ms) are past every decision, and a read_committed consumer has read
     the DLQ record of the end marker appended to every input partition;
     also in percent of (2), and exactly-once over at-least-once (goal at
     least 70%): the ratio of the median runs, and the median of each run's
     ratio. The decisions are then read back read_committed and checked
     after the clock: every transaction id decided once per transaction
     record carrying it.
  4. Latency, at least once and exactly once at each --commit-intervals: a
     fresh service (as in 3) on fresh topics each; a workload produced at
     --rate for --latency-duration; p50/p99/max of decision visible to a
     read_committed consumer minus produce call, over every transaction id.
Each phase (each service of 3, each configuration of 4) is bounded by
--timeout.`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := program().NewFlags("bench", benchSynopsis, stderr)
	var c benchConfig
	fs.IntVar(&c.events, "events", 200_000, "events of the throughput workload (phases 1-3)")
	fs.IntVar(&c.users, "users", 20_000, "distinct users of the workload")
	fs.Uint64Var(&c.seed, "seed", 1, "workload seed")
	fs.IntVar(&c.partitions, "partitions", 4, "partitions of every topic (tasks run one per partition; replay too)")
	fs.IntVar(&c.runs, "runs", 1, "runs of phases 2 and 3, alternated; each reports its median run (a noisy machine varies by a quarter from run to run)")
	deliveries := fs.String("delivery", kafka.AtLeastOnce+","+kafka.ExactlyOnce,
		"deliveries of phases 3 and 4, comma-separated: at-least-once, exactly-once (with both, phase 3 reports exactly-once's throughput as a ratio of at-least-once's)")
	intervals := fs.String("commit-intervals", kafka.ExactlyOnceDefaults.CheckpointInterval.String()+",1s",
		"exactly-once checkpoint intervals, comma-separated: outputs become visible when their checkpoint commits; phase 4 measures each, phase 3 runs at the first")
	fs.StringVar(&c.checkpoints, "checkpoints", kafka.CheckpointsKafka,
		"checkpoint store of the at-least-once services: kafka (as exactly-once's, which needs it) or dir (vigil serve's without --brokers)")
	fs.Float64Var(&c.rate, "rate", 10_000, "input rate of the latency phase, events/s (all streams together)")
	fs.DurationVar(&c.latencyDuration, "latency-duration", 10*time.Second, "how long the latency phase produces")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Minute, "bound on each phase (the latency phase: its duration plus this)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the results as one JSON object")
	fs.BoolVar(&c.secure, "secure", false, "the broker takes only SCRAM-SHA-512 over TLS (a throwaway certificate), and every client of the bench authenticates: the cost of security")
	fs.BoolVar(&c.verbose, "verbose", false, "log the services at info level (default: warnings only) to standard error")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) of one phase, while its clock runs, to this file")
	fs.StringVar(&c.profilePhase, "profile-phase", phaseKafka, "the phase --cpuprofile records, in its first run: passthrough, replay, kafka, latency, or kafka-exactly-once, latency-exactly-once (phases 3 and 4 under exactly-once)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	// The soft memory limit vigil serve and vigil replay set, so that
	// phases 2 to 4 collect as they do.
	defer gctune.MemoryLimit()()
	var bad []string
	if c.events <= 0 {
		bad = append(bad, "--events must be positive")
	}
	if c.users <= 0 {
		bad = append(bad, "--users must be positive")
	}
	if c.runs < 1 || c.runs > 50 {
		bad = append(bad, "--runs must be between 1 and 50")
	}
	if c.partitions < 1 || c.partitions > 1024 {
		bad = append(bad, "--partitions must be between 1 and 1024")
	}
	if !(c.rate > 0) || math.IsInf(c.rate, 0) {
		bad = append(bad, "--rate must be a positive number")
	}
	if c.latencyDuration <= 0 {
		bad = append(bad, "--latency-duration must be positive")
	}
	if c.timeout <= 0 {
		bad = append(bad, "--timeout must be positive")
	}
	if !slices.Contains(profilePhases, c.profilePhase) {
		bad = append(bad, "--profile-phase must be passthrough, replay, kafka or latency, or kafka-exactly-once or latency-exactly-once")
	}
	var err error
	if c.deliveries, err = parseDeliveries(*deliveries); err != nil {
		bad = append(bad, err.Error())
	}
	if c.commitIntervals, err = parseIntervals(*intervals); err != nil {
		bad = append(bad, err.Error())
	}
	if c.checkpoints != kafka.CheckpointsKafka && c.checkpoints != kafka.CheckpointsDir {
		bad = append(bad, "--checkpoints must be kafka or dir")
	}
	if len(bad) > 0 {
		fmt.Fprintln(stderr, strings.Join(bad, "\n"))
		fs.Usage()
		return cli.ErrUsage
	}

	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		c.prof = &cpuProfiler{phase: c.profilePhase, f: f}
	}
	res := &benchResult{GOMAXPROCS: runtime.GOMAXPROCS(0)}
	err = bench(ctx, c, res, stderr)
	if perr := c.prof.close(); perr != nil && err == nil {
		err = fmt.Errorf("cpu profile: %w", perr)
	}
	if err != nil {
		res.Error = err.Error()
	}
	if c.jsonOut {
		b, merr := json.Marshal(res)
		if merr != nil {
			return merr
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printBench(stdout, c, res)
	}
	return err
}

// benchRecord is one input record: its stream's topic index, partition, key
// (the user id), value, and for a transaction its id.
type benchRecord struct {
	stream int // index into the topics of streamTopics
	part   int32
	key    []byte
	value  []byte
	txID   string
}

type benchWorkloadData struct {
	ndjson  []byte
	records []benchRecord
	txIDs   int
	txCount map[string]int // transaction records per tx_id: the decisions each must get
	info    benchWorkload
}

func bench(ctx context.Context, c benchConfig, res *benchResult, stderr io.Writer) error {
	rs, err := rules.Load(examples.Fraud)
	if err != nil {
		return fmt.Errorf("example ruleset: %w", err)
	}
	names, topics := streamTopics(rs)

	wc := workload.Config{Users: c.users, Events: c.events, Seed: c.seed, Partitions: c.partitions}
	if err := wc.Validate(); err != nil {
		return err
	}
	wl, err := makeWorkload(wc, names)
	if err != nil {
		return err
	}
	res.Workload = wl.info

	dir, err := os.MkdirTemp("", "vigil-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bcfg := kafka.BrokerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "broker"), Partitions: int32(c.partitions)}
	var kc kconf.Config
	res.Security = "none"
	if c.secure {
		if kc, err = secureBenchBroker(&bcfg, dir); err != nil {
			return err
		}
		res.Security = kc.Protocol + " " + kc.Mechanism
	}
	broker, err := kafka.StartBroker(bcfg)
	if err != nil {
		return err
	}
	defer broker.Close()
	res.Broker = broker.Addr()
	kc.Brokers = []string{broker.Addr()}
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// The inputs, produced once (not a measured phase: phases 1 and 3 read them).
	const passthroughTopic = "bench.passthrough"
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	err = createTopics(pctx, kc, int32(c.partitions), append(slices.Clone(topics), passthroughTopic)...)
	var markers map[topicPartition]int64
	if err == nil {
		res.Load, markers, err = loadInputs(pctx, kc, topics, c.partitions, wl.records)
	}
	cancel()
	if err != nil {
		return phaseError(ctx, "loading the input topics", c.timeout, err)
	}
	res.EndMarkers = len(markers)

	runPhase := func(name string, run func() error) error {
		runtime.GC() // the previous phase's garbage is not this one's cost
		err := run()
		c.prof.end(name)
		return err
	}
	err = runPhase(phasePassthrough, func() (err error) {
		res.Passthrough, err = benchPassthroughPhase(ctx, c, kc, topics, passthroughTopic, len(wl.records), len(markers))
		return err
	})
	if err != nil {
		return err
	}
	var replays []*benchReplay
	kafkas := make(map[string][]*benchKafka) // phase 3's runs by delivery, in run order
	kafkaRuns := map[string]*[]float64{kafka.AtLeastOnce: &res.KafkaRuns, kafka.ExactlyOnce: &res.KafkaRunsExactlyOnce}
	for run := range c.runs {
		err := runPhase(phaseReplay, func() error {
			r, err := benchReplayPhase(ctx, c, rs, wl)
			if err == nil {
				replays = append(replays, r)
				res.ReplayRuns = append(res.ReplayRuns, r.EventsPerSec)
			}
			return err
		})
		for _, d := range runOrder(c.throughputConfigs(), run) {
			if err != nil {
				break
			}
			err = runPhase(profileKey(phaseKafka, d), func() error {
				k, err := benchKafkaPhase(ctx, c, run, d, kc, dir, wl, markers, log)
				if err == nil {
					kafkas[d.delivery] = append(kafkas[d.delivery], k)
					*kafkaRuns[d.delivery] = append(*kafkaRuns[d.delivery], k.EventsPerSec)
				}
				return err
			})
		}
		if err != nil {
			return err
		}
	}
	res.Replay = medianRun(replays, func(r *benchReplay) float64 { return r.EventsPerSec })
	median := func(runs []*benchKafka) *benchKafka {
		if len(runs) == 0 {
			return nil
		}
		k := medianRun(runs, func(k *benchKafka) float64 { return k.EventsPerSec })
		if res.Replay.EventsPerSec > 0 {
			k.PercentOfReplay = 100 * k.EventsPerSec / res.Replay.EventsPerSec
		}
		return k
	}
	res.VigilKafka = median(kafkas[kafka.AtLeastOnce])
	res.VigilKafkaExactlyOnce = median(kafkas[kafka.ExactlyOnce])
	res.ExactlyOnceRatio = ratio(kafkas[kafka.AtLeastOnce], kafkas[kafka.ExactlyOnce])

	for _, d := range c.latencyConfigs() {
		err := runPhase(profileKey(phaseLatency, d), func() error {
			l, err := benchLatencyPhase(ctx, c, d, kc, dir, log)
			if err == nil {
				res.Latencies = append(res.Latencies, l)
				if !d.exactlyOnce() {
					res.Latency = l
				}
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// medianRun returns the run of median rate (the lower middle one of an even
// number).
func medianRun[T any](runs []T, rate func(T) float64) T {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b T) int { return cmp.Compare(rate(a), rate(b)) })
	return sorted[(len(sorted)-1)/2]
}

// streamTopics returns the ruleset's input streams by name (index into
// topics) and their topics.
func streamTopics(rs *rules.Ruleset) (map[string]int, []string) {
	names := make(map[string]int)
	var topics []string
	for _, st := range rs.Streams {
		if st.Input() && st.Topic != "" {
			names[st.Name] = len(topics)
			topics = append(topics, st.Topic)
		}
	}
	return names, topics
}

// makeWorkload generates the workload as replay's NDJSON and as Kafka
// records: value unchanged, key the user id, partition the one the NDJSON
// line names (so that Kafka's tasks get the same users as replay's).
func makeWorkload(wc workload.Config, names map[string]int) (*benchWorkloadData, error) {
	var buf bytes.Buffer
	if _, err := workload.Generate(&buf, wc); err != nil {
		return nil, err
	}
	wl := &benchWorkloadData{ndjson: buf.Bytes(), txCount: make(map[string]int)}
	wl.info = benchWorkload{Events: wc.Events, Users: wc.Users, Seed: wc.Seed, Partitions: max(wc.Partitions, 1)}
	for line := range bytes.Lines(wl.ndjson) {
		var l struct {
			Stream    string          `json:"stream"`
			Value     json.RawMessage `json:"value"`
			Partition int32           `json:"partition"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("workload line: %w", err)
		}
		var v struct {
			UserID string `json:"user_id"`
			TxID   string `json:"tx_id"`
		}
		if err := json.Unmarshal(l.Value, &v); err != nil {
			return nil, fmt.Errorf("workload value: %w", err)
		}
		si, ok := names[l.Stream]
		if !ok {
			return nil, fmt.Errorf("workload stream %q is not an input of the example ruleset", l.Stream)
		}
		r := benchRecord{stream: si, part: l.Partition, key: []byte(v.UserID), value: l.Value}
		switch l.Stream {
		case "transactions":
			r.txID = v.TxID
			wl.txCount[v.TxID]++
			wl.info.Transactions++
		case "logins":
			wl.info.Logins++
		case "devices":
			wl.info.Devices++
		}
		wl.info.Bytes += len(l.Value)
		wl.records = append(wl.records, r)
	}
	wl.txIDs = len(wl.txCount)
	wl.info.TransactionIDs = wl.txIDs
	if len(wl.records) != wc.Events {
		return nil, fmt.Errorf("workload: %d records generated, want %d", len(wl.records), wc.Events)
	}
	return wl, nil
}

// secureBenchBroker gives the bench's broker one SCRAM-SHA-512 superuser and
// TLS with a self-signed certificate for 127.0.0.1 (written under dir for the
// clients to trust), and returns the clients' connection, brokers unset.
func secureBenchBroker(cfg *kafka.BrokerConfig, dir string) (kconf.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return kconf.Config{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vigil bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return kconf.Config{}, err
	}
	ca := filepath.Join(dir, "bench-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return kconf.Config{}, err
	}
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	pass := kconf.Secret(rand.Text())
	cfg.Users = []kafka.BrokerUser{{Name: "bench", Password: pass, Mechanism: kconf.MechScramSHA512, Superuser: true}}
	return kconf.Config{Protocol: kconf.SASLSSL, Mechanism: kconf.MechScramSHA512, Username: "bench", Password: pass, CAFile: ca}, nil
}

// benchClient opens a client of the bench's broker with extra options.
func benchClient(kc kconf.Config, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := kc.Opts()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(opts, extra...)...)
}

func createTopics(ctx context.Context, kc kconf.Config, partitions int32, topics ...string) error {
	cl, err := benchClient(kc)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return err
	}
	return resp.Error()
}

// topicPartition names one partition of one topic.
type topicPartition struct {
	topic string
	part  int32
}

// endMarker is the value of the record that ends every input partition in
// the throughput phases. It is not JSON: the service sends it to the DLQ,
// with its topic, partition and offset, when its task reaches it, which
// shows that everything before it on that partition was processed.
const endMarker = "bench: end of input"

// loadInputs produces the records to their topics, waits for every ack,
// then appends an end marker to every input partition; it returns the
// markers' offsets.
func loadInputs(ctx context.Context, kc kconf.Config, topics []string, partitions int, recs []benchRecord) (benchThroughput, map[topicPartition]int64, error) {
	cl, err := benchClient(kc, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return benchThroughput{}, nil, err
	}
	defer cl.Close()
	start := time.Now()
	var firstErr atomic.Pointer[error]
	for i := range recs {
		r := &recs[i]
		kr := &kgo.Record{Topic: topics[r.stream], Partition: r.part, Key: r.key, Value: r.value}
		cl.Produce(ctx, kr, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return benchThroughput{}, nil, err
	}
	if e := firstErr.Load(); e != nil {
		return benchThroughput{}, nil, *e
	}
	load := throughput(len(recs), time.Since(start))
	var marks []*kgo.Record
	for _, topic := range topics {
		for p := range partitions {
			marks = append(marks, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(endMarker)})
		}
	}
	if err := cl.ProduceSync(ctx, marks...).FirstErr(); err != nil {
		return benchThroughput{}, nil, fmt.Errorf("end markers: %w", err)
	}
	markers := make(map[topicPartition]int64, len(marks))
	for _, r := range marks {
		markers[topicPartition{r.Topic, r.Partition}] = r.Offset
	}
	return load, markers, nil
}

func throughput(n int, d time.Duration) benchThroughput {
	return benchThroughput{Events: n, Seconds: d.Seconds(), EventsPerSec: float64(n) / d.Seconds()}
}

// phaseError says which phase failed, and whether it ran out of time or was
// interrupted.
func phaseError(parent context.Context, phase string, timeout time.Duration, err error) error {
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("%s: interrupted: %w", phase, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s timed out after %s: %w", phase, timeout, err)
	}
	return fmt.Errorf("%s: %w", phase, err)
}

// errStopped wraps a phase's progress when its context ended (timed out
// or interrupted).
func errStopped(ctx context.Context, progress string) error {
	return fmt.Errorf("%s: %w", progress, ctx.Err())
}

// benchPassthroughPhase: phase 1. The clock runs from the creation of a
// client (it joins a fresh group, reads the input topics from the start) to
// the acknowledgement of the last record it produced to the output topic.
// The client is configured as the service's: range balancer, no auto
// commit, the service's fetch wait, linger, buffer and manual partitioning
// (partition p in, partition p out).
func benchPassthroughPhase(ctx context.Context, c benchConfig, kc kconf.Config, inputs []string, out string, events, markers int) (*benchPassthrough, error) {
	n := events + markers // the end markers are records too
	title := phaseTitles[phasePassthrough]
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	d := kafka.DefaultConfig
	c.prof.begin(phasePassthrough)
	start := time.Now()
	cl, err := benchClient(kc,
		kgo.ConsumerGroup("bench-passthrough"),
		kgo.ConsumeTopics(inputs...),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(d.FetchMaxWait),
		kgo.FetchMinBytes(d.FetchMinBytes),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(d.MaxBufferedRecords),
		kgo.ProducerLinger(d.Linger),
		kgo.RecordDeliveryTimeout(0),
	)
	if err != nil {
		return nil, phaseError(ctx, title, c.timeout, err)
	}
	var (
		consumed, acked atomic.Int64
		end             atomic.Int64 // unix ns of the last ack
		firstErr        atomic.Pointer[error]
		done            = make(chan struct{})
		doneOnce        sync.Once
	)
	onAck := func(_ *kgo.Record, err error) {
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				firstErr.CompareAndSwap(nil, &err)
			}
			return
		}
		if acked.Add(1) == int64(n) {
			end.Store(time.Now().UnixNano())
			doneOnce.Do(func() { close(done) })
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for pctx.Err() == nil {
			fs := cl.PollRecords(pctx, 10_000)
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				consumed.Add(1)
				cl.Produce(pctx, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value}, onAck)
			})
		}
	})
	var werr error
	select {
	case <-done:
		c.prof.end(phasePassthrough)
	case <-pctx.Done():
		werr = errStopped(pctx, fmt.Sprintf("%d of %d records consumed, %d acknowledged", consumed.Load(), n, acked.Load()))
	}
	cancel()
	wg.Wait()
	cl.Close()
	if werr == nil {
		if e := firstErr.Load(); e != nil {
			werr = fmt.Errorf("produce: %w", *e)
		}
	}
	if werr != nil {
		return nil, phaseError(ctx, title, c.timeout, werr)
	}
	return &benchPassthrough{benchThroughput: throughput(events, time.Unix(0, end.Load()).Sub(start)), Produced: int(acked.Load())}, nil
}

// gcPercent returns the collector's current setting.
func gcPercent() int {
	v := debug.SetGCPercent(100)
	debug.SetGCPercent(v)
	return v
}

// benchReplayPhase: phase 2, replay.Run as `vigil replay` runs it, but with
// vigil serve's collector settings (unless GOGC is set), over the workload's
// NDJSON in memory, output discarded. The clock covers the Replay call.
func benchReplayPhase(ctx context.Context, c benchConfig, rs *rules.Ruleset, wl *benchWorkloadData) (*benchReplay, error) {
	title := phaseTitles[phaseReplay]
	defer gctune.Serve(gctune.ServeHeapRatio)() // as phase 3: see the help
	gogc := gcPercent()
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	c.prof.begin(phaseReplay)
	start := time.Now()
	stats, err := replay.Run(pctx, rs, bytes.NewReader(wl.ndjson), io.Discard, replay.Config{})
	elapsed := time.Since(start)
	c.prof.end(phaseReplay)
	if err != nil {
		return nil, phaseError(ctx, title, c.timeout, fmt.Errorf("%d of %d records replayed: %w", stats.Records, len(wl.records), err))
	}
	if stats.Records != int64(len(wl.records)) {
		return nil, fmt.Errorf("%s: %d records replayed, want %d", title, stats.Records, len(wl.records))
	}
	return &benchReplay{benchThroughput: throughput(int(stats.Records), elapsed), Decisions: stats.Decisions, GOGC: gogc}, nil
}

// benchKafkaPhase: phase 3 under delivery d. A kafka.Service (fresh group,
// data directory and output topics, the DefaultConfig settings but d's)
// runs over the input topics, which hold the whole workload already, each
// partition ending with an end marker. The clock runs from the Run call to
// the moment (a) a decision for every transaction record (duplicates are
// re-emitted: one decision record per transaction record) is visible to a
// read_committed consumer, and (b) a read_committed consumer of the DLQ has
// read the DLQ record of every end marker: every input partition was
// processed to its end (the last decision can come before the last login or
// device is processed).
//
// (a) is known without reading the decisions: a consumer of 700k records
// would share the two cores with the service while the clock runs, which a
// real deployment's downstream consumers do not. The decisions topic's last
// stable offsets (the end of what read_committed may read) are polled and
// their changes noted (stableOffsetWatcher); the decisions are read back
// read_committed after the clock stops, and (a)'s moment is the first poll
// past the last decision of every partition. Under at-least-once the last
// stable offset is the high watermark and the offsets count the decisions,
// so the clock stops at the poll that sees as many as transaction records.
// Under exactly-once the offsets also count the transactions' commit
// markers: the service is stopped once they reach that many and (b) holds
// (the end markers' DLQ records commit in the same transaction as the
// decisions before them, or a later one), and the read-back finds (a)'s
// moment; a decision not visible by the stop fails the phase.
//
// The read-back checks that every tx_id was decided once per transaction
// record carrying it. The service is stopped at the clock; its final
// checkpoint commits the input offsets it processed, reported as
// processed_at_stop (events + end markers).
func benchKafkaPhase(ctx context.Context, c benchConfig, nth int, d deliveryConfig, kc kconf.Config, dir string, wl *benchWorkloadData,
	markers map[topicPartition]int64, log *slog.Logger) (*benchKafka, error) {
	defer gctune.Serve(gctune.ServeHeapRatio)() // as vigil serve sets it
	title := phaseTitles[phaseKafka] + ", " + d.String()
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cfg := kafka.DefaultConfig
	cfg.Kafka = kc
	// A fresh group, data directory and outputs for every run and
	// delivery: nothing of an earlier service is read back.
	suffix := fmt.Sprintf(".run%d%s", nth, d.suffix())
	cfg.Group = "bench-vigil" + suffix
	cfg.DataDir = filepath.Join(dir, "vigil"+suffix)
	cfg.Topics = cfg.Topics.WithSuffix(suffix)
	cfg.Partitions = int32(c.partitions)
	cfg.Logger = log
	d.apply(&cfg)
	svc, err := kafka.New(pctx, cfg, examples.Fraud, true)
	if err != nil {
		return nil, phaseError(ctx, title, c.timeout, fmt.Errorf("start the service: %w", err))
	}
	// Timed: the last stable offsets of the decisions topic, polled, and
	// the DLQ (end markers; a few records) read.
	w, err := watchDecisions(kc, "", "", cfg.Topics.DLQ, markers)
	if err != nil {
		return nil, err
	}
	defer w.close()
	marked := w.goal(func(s decisionCounts) bool { return s.markers >= len(markers) })
	visible, err := watchStableOffsets(ctx, kc, cfg.Topics.Decisions, int64(wl.info.Transactions))
	if err != nil {
		return nil, err
	}
	defer visible.close()

	key := profileKey(phaseKafka, d)
	c.prof.begin(key)
	run := startService(ctx, svc, cfg.ShutdownTimeout)
	start := time.Now()
	var markedAt time.Time
	var werr error
	for waiting := 2; waiting > 0 && werr == nil; {
		select {
		case markedAt = <-marked:
			waiting--
		case <-visible.reached:
			waiting--
		case err := <-run.done:
			run.done <- err // stop reads it
			werr = fmt.Errorf("the service stopped: %v", err)
		case <-pctx.Done():
			werr = errStopped(pctx, fmt.Sprintf("the decisions topic's last stable offsets sum to %d of %d decision records (commit markers included), %d of %d partitions processed to their end marker",
				visible.sum(), wl.info.Transactions, w.counts().markers, len(markers)))
		}
	}
	c.prof.end(key)
	visible.close() // its history ends here: the shutdown's commits are not in it
	markersSeen := w.counts().markers
	if err := run.stop(); err != nil {
		werr = errors.Join(werr, err)
	}
	if werr != nil {
		return nil, phaseError(ctx, title, c.timeout, werr)
	}
	// Untimed: every transaction id decided once per transaction record,
	// and when the last decision became visible.
	rb, err := readBackDecisions(pctx, kc, cfg.Topics.Decisions, c.partitions)
	if err != nil {
		return nil, phaseError(ctx, title, c.timeout, fmt.Errorf("reading back the decisions: %w", err))
	}
	if err := checkDecided(wl.txCount, rb); err != nil {
		return nil, fmt.Errorf("%s: %w", title, err)
	}
	visibleAt, err := visible.pastAll(rb.lastOffsets())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", title, err)
	}
	s := rb.counts()
	res := &benchKafka{benchThroughput: throughput(len(wl.records), latest(markedAt, visibleAt).Sub(start)), benchDelivery: d.report(),
		Decisions: s.records, DecisionIDs: s.ids, EndMarkers: markersSeen, FirstDecisionMs: ms(rb.firstDecision().Sub(start)),
		FirstVisibleMs: ms(visible.firstVisible().Sub(start)), GOGC: gcPercent()}
	// The final checkpoint committed what the tasks processed.
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if res.ProcessedAtStop, err = committed(cctx, kc, cfg.Group); err != nil {
		return nil, fmt.Errorf("%s: reading the committed offsets: %w", title, err)
	}
	return res, nil
}

// endOfDecisions is the key and value of the record readBackDecisions
// appends to every partition of a decisions topic once its service has
// stopped: a read_committed consumer that has read it has read every
// committed decision before it, which no count of offsets tells (commit
// markers take offsets too).
const endOfDecisions = "bench: end of decisions"

// readBackDecisions reads a stopped service's decisions topic read_committed,
// to the end: it appends endOfDecisions to each of its partitions and reads
// until it has seen them all. The watcher it returns is closed.
func readBackDecisions(ctx context.Context, kc kconf.Config, topic string, partitions int) (*decisionWatcher, error) {
	cl, err := benchClient(kc, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	var ends []*kgo.Record
	for p := range partitions {
		ends = append(ends, &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(endOfDecisions), Value: []byte(endOfDecisions)})
	}
	err = cl.ProduceSync(ctx, ends...).FirstErr()
	cl.Close()
	if err != nil {
		return nil, fmt.Errorf("end of decisions: %w", err)
	}
	w, err := watchDecisions(kc, topic, "", "", nil)
	if err != nil {
		return nil, err
	}
	defer w.close()
	select {
	case <-w.goal(func(s decisionCounts) bool { return s.ends >= partitions }):
		return w, nil
	case <-ctx.Done():
		s := w.counts()
		return nil, errStopped(ctx, fmt.Sprintf("%d decisions read, the end of %d of %d partitions (a transaction left open holds read_committed consumers back)",
			s.records, s.ends, partitions))
	}
}

// checkDecided compares the decisions w read back (w closed) with the
// transaction records of the workload (want: tx_id to records): every tx_id
// decided once per record, as replay decides, and no other id.
func checkDecided(want map[string]int, w *decisionWatcher) error {
	var bad []string
	for id, n := range want {
		if got := w.seen[id].n; got != n {
			bad = append(bad, fmt.Sprintf("%s: %d decisions for %d transaction records", id, got, n))
		}
	}
	for id, s := range w.seen {
		if _, ok := want[id]; !ok {
			bad = append(bad, fmt.Sprintf("%s: %d decisions, not a tx_id of the workload", id, s.n))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("%d tx ids not decided once per transaction record, e.g. %s", len(bad), strings.Join(bad[:min(len(bad), 3)], "; "))
}

// runningService is a Service whose Run goroutine is going.
type runningService struct {
	cancel   context.CancelFunc
	done     chan error // receives Run's result
	shutdown time.Duration
}

func startService(ctx context.Context, svc *kafka.Service, shutdown time.Duration) *runningService {
	rctx, cancel := context.WithCancel(ctx)
	r := &runningService{cancel: cancel, done: make(chan error, 1), shutdown: shutdown}
	go func() { r.done <- svc.Run(rctx) }()
	return r
}

// stop cancels Run and waits for it, bounded by the shutdown timeout.
func (r *runningService) stop() error {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			return fmt.Errorf("the service stopped with: %w", err)
		}
		return nil
	case <-time.After(r.shutdown + 10*time.Second):
		return fmt.Errorf("the service did not stop within %s", r.shutdown+10*time.Second)
	}
}

// committed sums the group's committed offsets.
func committed(ctx context.Context, kc kconf.Config, group string) (int64, error) {
	cl, err := benchClient(kc)
	if err != nil {
		return 0, err
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	if err := offs.Error(); err != nil {
		return 0, err
	}
	var n int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At > 0 {
			n += o.At
		}
	})
	return n, nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stableOffsetWatcher polls the last stable offsets of a topic's partitions,
// the end of what a read_committed consumer may read (with no transaction,
// as under at-least-once, the high watermark), and notes each partition's
// every change with the time of the poll that saw it: when records became
// visible, known without reading them. It polls until closed.
type stableOffsetWatcher struct {
	reached chan time.Time // receives the time of the first poll whose offsets sum to goal
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	topic   string

	mu      sync.Mutex
	last    int64                  // the sum of the last poll
	history map[int32][]offsetSeen // each partition's offsets, in the order seen; a partition at 0 has none
}

// offsetSeen is a partition's last stable offset as of a poll.
type offsetSeen struct {
	at     time.Time
	offset int64
}

// offsetPoll is how often a stableOffsetWatcher asks: fine next to a
// phase of seconds, and a light load on the broker.
const offsetPoll = 5 * time.Millisecond

func watchStableOffsets(ctx context.Context, kc kconf.Config, topic string, goal int64) (*stableOffsetWatcher, error) {
	cl, err := benchClient(kc)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithCancel(ctx)
	w := &stableOffsetWatcher{reached: make(chan time.Time, 1), cancel: cancel, topic: topic, history: make(map[int32][]offsetSeen)}
	w.wg.Go(func() {
		defer adm.Close()
		tick := time.NewTicker(offsetPoll)
		defer tick.Stop()
		for reached := false; ; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			offs, err := adm.ListCommittedOffsets(ctx, topic)
			if err != nil {
				continue // the next poll asks again; the phase's timeout bounds it
			}
			now := time.Now()
			var n int64
			w.mu.Lock()
			offs.Each(func(o kadm.ListedOffset) {
				if o.Err != nil {
					return
				}
				n += o.Offset
				h := w.history[o.Partition]
				if (len(h) == 0 && o.Offset > 0) || (len(h) > 0 && o.Offset > h[len(h)-1].offset) {
					w.history[o.Partition] = append(h, offsetSeen{now, o.Offset})
				}
			})
			w.last = n
			w.mu.Unlock()
			if n >= goal && !reached {
				w.reached <- now
				reached = true
			}
		}
	})
	return w, nil
}

// sum is the total of the last poll.
func (w *stableOffsetWatcher) sum() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// pastAll returns the time of the first poll by which the last stable
// offset of every partition was past last[partition]: when a read_committed
// consumer could read every record up to those offsets. It fails if a
// partition's was not by the last poll.
func (w *stableOffsetWatcher) pastAll(last map[int32]int64) (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	for p, off := range last {
		h := w.history[p]
		i := slices.IndexFunc(h, func(s offsetSeen) bool { return s.offset > off })
		if i < 0 {
			stable := int64(0)
			if len(h) > 0 {
				stable = h[len(h)-1].offset
			}
			return time.Time{}, fmt.Errorf("%s partition %d: the record at offset %d was not visible to read_committed consumers when the clock stopped (last stable offset %d)",
				w.topic, p, off, stable)
		}
		at = latest(at, h[i].at)
	}
	return at, nil
}

// firstVisible returns the time of the first poll that saw a record: the
// topic is fresh, so a partition's last stable offset above 0 is a record
// visible (a transaction adds only the partitions it writes to).
func (w *stableOffsetWatcher) firstVisible() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, h := range w.history {
		if len(h) > 0 && (first.IsZero() || h[0].at.Before(first)) {
			first = h[0].at
		}
	}
	return first
}

// close stops the polls; the watcher still answers.
func (w *stableOffsetWatcher) close() {
	w.cancel()
	w.wg.Wait()
}

// decisionCounts is what a decisionWatcher has read.
type decisionCounts struct {
	records int // decision records, warm-up ones excluded
	ids     int // distinct ids among them
	warm    int // distinct warm-up ids
	markers int // end markers seen on the DLQ
	ends    int // partitions whose endOfDecisions record was read
}

// decisionWatcher reads a decisions topic from its start, read_committed (as
// a downstream consumer of exactly-once outputs must; under at-least-once
// it reads the same), and notes when it first saw each id and how many
// decisions each got; when given a DLQ topic, it also counts the end
// markers that reached it.
type decisionWatcher struct {
	cl         *kgo.Client
	warmPrefix string
	dlq        string
	markers    map[topicPartition]int64
	marked     map[topicPartition]bool
	wg         sync.WaitGroup
	cancel     context.CancelFunc
	closeOnce  sync.Once

	mu      sync.Mutex
	seen    map[string]idSeen
	last    map[int32]int64 // each partition's last decision's offset, warm-up ones included
	firstAt time.Time       // the earliest timestamp of a (not warm-up) decision: when the service produced it
	c       decisionCounts
	cond    func(decisionCounts) bool
	notify  chan time.Time
}

// idSeen is what a decisionWatcher noted of one id.
type idSeen struct {
	first time.Time // when its first decision was read
	n     int       // its decisions
}

func watchDecisions(kc kconf.Config, topic, warmPrefix, dlq string, markers map[topicPartition]int64) (*decisionWatcher, error) {
	var topics []string
	if topic != "" {
		topics = append(topics, topic)
	}
	if dlq != "" {
		topics = append(topics, dlq)
	}
	cl, err := benchClient(kc, kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &decisionWatcher{cl: cl, warmPrefix: warmPrefix, dlq: dlq, markers: markers, marked: make(map[topicPartition]bool),
		cancel: cancel, seen: make(map[string]idSeen), last: make(map[int32]int64)}
	w.wg.Go(func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			if fs.IsClientClosed() {
				return
			}
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if r.Topic == w.dlq {
					w.dlqRecord(r)
					return
				}
				id := string(r.Key)
				if id == endOfDecisions {
					w.c.ends++
					return
				}
				w.last[r.Partition] = max(w.last[r.Partition], r.Offset)
				s, ok := w.seen[id]
				s.n++
				if !ok {
					s.first = now
				}
				w.seen[id] = s
				if warmPrefix != "" && strings.HasPrefix(id, warmPrefix) {
					if !ok {
						w.c.warm++
					}
					return
				}
				w.c.records++
				if w.firstAt.IsZero() || r.Timestamp.Before(w.firstAt) {
					w.firstAt = r.Timestamp
				}
				if !ok {
					w.c.ids++
				}
			})
			w.check(now)
			w.mu.Unlock()
		}
	})
	return w, nil
}

// dlqRecord counts r if it is the DLQ record of an end marker. It runs with
// w.mu held.
func (w *decisionWatcher) dlqRecord(r *kgo.Record) {
	var d struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	}
	if json.Unmarshal(r.Value, &d) != nil {
		return
	}
	tp := topicPartition{d.Topic, d.Partition}
	if off, ok := w.markers[tp]; ok && off == d.Offset && !w.marked[tp] {
		w.marked[tp] = true
		w.c.markers++
	}
}

// goal returns a channel that receives the time of the poll after which
// cond first held. One goal at a time.
func (w *decisionWatcher) goal(cond func(decisionCounts) bool) <-chan time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cond, w.notify = cond, make(chan time.Time, 1)
	w.check(time.Now())
	return w.notify
}

// check runs with w.mu held.
func (w *decisionWatcher) check(now time.Time) {
	if w.cond != nil && w.cond(w.c) {
		w.notify <- now
		w.cond = nil
	}
}

func (w *decisionWatcher) firstDecision() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstAt
}

func (w *decisionWatcher) counts() decisionCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.c
}

// received returns the time id's first decision was read, after close.
func (w *decisionWatcher) received(id string) (time.Time, bool) {
	s, ok := w.seen[id]
	return s.first, ok
}

// lastOffsets returns each partition's last decision's offset, after close.
func (w *decisionWatcher) lastOffsets() map[int32]int64 { return w.last }

func (w *decisionWatcher) close() {
	w.closeOnce.Do(func() {
		w.cancel()
		w.cl.Close()
		w.wg.Wait()
	})
}

// latencySuffix renames the latency phase's topics, so that phase 3's
// backlog and outputs are not in its way (deliveryConfig.suffix follows it:
// each configuration has topics of its own).
const latencySuffix = ".bench-latency"

// latencyWarmPrefix starts the ids of phase 4's warm-up transactions, which
// the decision watcher counts apart: they are not in the latencies.
const latencyWarmPrefix = "bench-warmup-"

// benchLatencyPhase: phase 4 under delivery d. A fresh service (its own
// input, output and rules topics, group and data directory; DefaultConfig
// settings but d's) is started and warmed up (one transaction per
// partition, decided before the clock starts). Then a workload of
// rate×duration events is produced at the rate, each record's send time
// being the moment its Produce call is made; a read_committed consumer of
// the decisions topic notes when each transaction id's first decision
// arrives: under exactly-once, after the commit of the checkpoint that
// follows it. Latency is arrival − send of every transaction id.
func benchLatencyPhase(ctx context.Context, c benchConfig, d deliveryConfig, kc kconf.Config, dir string, log *slog.Logger) (*benchLatency, error) {
	defer gctune.Serve(gctune.ServeHeapRatio)() // as vigil serve sets it
	title := phaseTitles[phaseLatency] + ", " + d.String()
	bound := c.latencyDuration + c.timeout
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	fail := func(err error) (*benchLatency, error) { return nil, phaseError(ctx, title, bound, err) }

	lw, err := newLatencyWorkload(c, latencySuffix+d.suffix())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", title, err)
	}
	cfg := latencyServiceConfig(c, d, kc, dir, log)
	svc, err := kafka.New(pctx, cfg, lw.ruleset, true)
	if err != nil {
		return fail(fmt.Errorf("start the service: %w", err))
	}
	w, err := watchDecisions(kc, cfg.Topics.Decisions, latencyWarmPrefix, "", nil)
	if err != nil {
		return nil, err
	}
	defer w.close()
	run := startService(ctx, svc, cfg.ShutdownTimeout)
	stopped := false
	defer func() {
		if !stopped {
			run.stop()
		}
	}()
	prod, err := newLatencyProducer(kc)
	if err != nil {
		return nil, err
	}
	defer prod.close()

	if err := warmUp(pctx, prod, w, run, lw.txTopic, c.partitions); err != nil {
		return fail(err)
	}
	done := w.goal(func(s decisionCounts) bool { return s.ids >= lw.txIDs })
	key := profileKey(phaseLatency, d)
	c.prof.begin(key)
	sent, err := sendPaced(pctx, prod, lw, c.rate)
	if err != nil {
		return fail(err)
	}
	werr := awaitDecisions(pctx, done, run, w, lw)
	c.prof.end(key)
	stopped = true
	if err := run.stop(); err != nil {
		werr = errors.Join(werr, err)
	}
	if err := prod.err(); err != nil {
		werr = errors.Join(werr, fmt.Errorf("produce: %w", err))
	}
	if werr != nil {
		return fail(werr)
	}
	w.close() // received reads what it noted without its lock
	return latencyResult(c, d, lw, sent, w), nil
}

// latencyWorkload is phase 4's input: the example ruleset with its topics
// renamed (latencySuffix), and a workload for those topics.
type latencyWorkload struct {
	*benchWorkloadData
	ruleset []byte   // the renamed document: the service's first version
	topics  []string // the renamed input topics, by benchRecord.stream
	txTopic string   // the transactions' topic, where the warm-up goes
	users   int      // the workload's users, which may be fewer than --users
}

// newLatencyWorkload renames the example's topics (suffix) and generates
// rate × duration events for them, paced at the rate in event time too. A
// short phase has too few events for the fraud planted for --users users:
// the users are halved until the workload is valid, rather than refusing a
// short phase.
func newLatencyWorkload(c benchConfig, suffix string) (*latencyWorkload, error) {
	seed, err := renameTopics(examples.Fraud, suffix)
	if err != nil {
		return nil, err
	}
	lrs, err := rules.Load(seed)
	if err != nil {
		return nil, fmt.Errorf("renamed ruleset: %w", err)
	}
	names, topics := streamTopics(lrs)
	events := max(1, int(math.Round(c.rate*c.latencyDuration.Seconds())))
	wc := workload.Config{Users: c.users, Events: events, Seed: c.seed, Partitions: c.partitions, Rate: c.rate}
	for wc.Validate() != nil && wc.Users > 1 {
		wc.Users /= 2
	}
	if err := wc.Validate(); err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	wl, err := makeWorkload(wc, names)
	if err != nil {
		return nil, err
	}
	return &latencyWorkload{benchWorkloadData: wl, ruleset: seed, topics: topics,
		txTopic: topics[names["transactions"]], users: wc.Users}, nil
}

// latencyServiceConfig is phase 4's service under d: DefaultConfig, whose
// latency settings are the ones measured, with d's delivery and
// checkpoints, and a group, data directory and topics of its own, so that
// nothing phase 3 or another configuration left is read or in the way.
func latencyServiceConfig(c benchConfig, d deliveryConfig, kc kconf.Config, dir string, log *slog.Logger) kafka.Config {
	cfg := kafka.DefaultConfig
	cfg.Kafka = kc
	cfg.Group = "bench-latency" + d.suffix()
	cfg.DataDir = filepath.Join(dir, "latency"+d.suffix())
	cfg.Partitions = int32(c.partitions)
	cfg.Logger = log
	cfg.Topics = cfg.Topics.WithSuffix(latencySuffix + d.suffix())
	d.apply(&cfg)
	return cfg
}

// latencyProducer sends phase 4's records: each to the partition the
// workload names, with no linger (a record leaves when it is due, as a
// latency-minded producer sends it) and no delivery timeout (the phase's
// context bounds it). Acknowledgements are not awaited one by one, which
// would slow the pace down; the first failed one is kept, and fails the
// phase after the run.
type latencyProducer struct {
	cl    *kgo.Client
	onAck func(*kgo.Record, error)
	first atomic.Pointer[error]
}

func newLatencyProducer(kc kconf.Config) (*latencyProducer, error) {
	cl, err := benchClient(kc, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(0))
	if err != nil {
		return nil, err
	}
	p := &latencyProducer{cl: cl}
	p.onAck = func(_ *kgo.Record, err error) {
		// Records still in flight when the phase stops fail with these.
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
			p.first.CompareAndSwap(nil, &err)
		}
	}
	return p, nil
}

func (p *latencyProducer) produce(ctx context.Context, r *kgo.Record) { p.cl.Produce(ctx, r, p.onAck) }

// err returns the first failed acknowledgement, or nil.
func (p *latencyProducer) err() error {
	if e := p.first.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *latencyProducer) close() { p.cl.Close() }

// warmUp sends a transaction on every partition, from users of its own, a
// minute of event time before the workload, and returns once the service
// has decided them all: the clock then starts with the group joined and the
// tasks running, so that start-up is not counted as latency.
func warmUp(ctx context.Context, prod *latencyProducer, w *decisionWatcher, run *runningService, txTopic string, partitions int) error {
	warmed := w.goal(func(s decisionCounts) bool { return s.warm >= partitions })
	for p := range partitions {
		id := fmt.Sprintf("%s%d", latencyWarmPrefix, p)
		v := fmt.Sprintf(`{"tx_id":%q,"user_id":%q,"amount":1,"currency":"EUR","merchant":"m0000","card":"c%s",`+
			`"ip":"127.0.0.1","device":"d%s","country":"FR","ts":%d}`, id, id, id, id, workload.DefaultStart-60_000)
		prod.produce(ctx, &kgo.Record{Topic: txTopic, Partition: int32(p), Key: []byte(id), Value: []byte(v)})
	}
	select {
	case <-warmed:
		return nil
	case err := <-run.done:
		run.done <- err // stop reads it
		return fmt.Errorf("warm-up: the service stopped: %v", err)
	case <-ctx.Done():
		return errStopped(ctx, fmt.Sprintf("warm-up: %d of %d warm-up transactions decided", w.counts().warm, partitions))
	}
}

// pacedSend is what sendPaced noted.
type pacedSend struct {
	sent        map[string]time.Time // each transaction id's first Produce call
	start, last time.Time            // the loop's start (record 0 due) and its last Produce call
	behind      time.Duration        // the most a Produce call came after its due time
}

// sendPaced produces the workload's records in order at rate, record i due
// at start + i/rate, and notes when each transaction id was first sent. The
// schedule is open loop: a record sent late does not push the later ones
// back, so a producer that falls behind catches up and says by how much
// (behind), rather than lowering the rate the service is measured at.
func sendPaced(ctx context.Context, prod *latencyProducer, lw *latencyWorkload, rate float64) (*pacedSend, error) {
	s := &pacedSend{sent: make(map[string]time.Time, lw.txIDs)}
	interval := float64(time.Second) / rate
	s.start = time.Now()
	for i := range lw.records {
		due := s.start.Add(time.Duration(float64(i) * interval))
		now := time.Now()
		if d := due.Sub(now); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			now = time.Now()
		}
		if ctx.Err() != nil {
			return nil, errStopped(ctx, fmt.Sprintf("%d of %d events produced", i, len(lw.records)))
		}
		s.behind = max(s.behind, now.Sub(due))
		r := &lw.records[i]
		if r.txID != "" {
			if _, ok := s.sent[r.txID]; !ok {
				s.sent[r.txID] = now
			}
		}
		s.last = now
		prod.produce(ctx, &kgo.Record{Topic: lw.topics[r.stream], Partition: r.part, Key: r.key, Value: r.value})
	}
	return s, nil
}

// awaitDecisions waits, once every record is sent, for done: a decision for
// every transaction id. Otherwise it says why the decisions did not come:
// the service stopped, or the phase timed out or was interrupted.
func awaitDecisions(ctx context.Context, done <-chan time.Time, run *runningService, w *decisionWatcher, lw *latencyWorkload) error {
	select {
	case <-done:
		return nil
	case err := <-run.done:
		run.done <- err // stop reads it
		return fmt.Errorf("the service stopped: %v", err)
	case <-ctx.Done():
		s := w.counts()
		return errStopped(ctx, fmt.Sprintf("all %d events produced; %d of %d transaction ids decided", len(lw.records), s.ids, lw.txIDs))
	}
}

// latencyResult computes the phase's figures from the send times and the
// arrival times the watcher noted (w closed): the latency of a transaction
// id is its first decision's arrival minus its first Produce call, and the
// achieved rate counts from the first to the last Produce call.
func latencyResult(c benchConfig, d deliveryConfig, lw *latencyWorkload, s *pacedSend, w *decisionWatcher) *benchLatency {
	lat := make([]time.Duration, 0, len(s.sent))
	for id, at := range s.sent {
		if got, ok := w.received(id); ok {
			lat = append(lat, got.Sub(at))
		}
	}
	slices.Sort(lat)
	res := &benchLatency{benchDelivery: d.report(), Rate: c.rate, DurationSeconds: c.latencyDuration.Seconds(), Users: lw.users,
		Events: len(lw.records), Transactions: lw.info.Transactions, TransactionIDs: lw.txIDs, Decided: len(lat),
		MaxBehindMs: ms(s.behind), GOGC: gcPercent()}
	if span := s.last.Sub(s.start); span > 0 && len(lw.records) > 1 {
		res.AchievedRate = float64(len(lw.records)-1) / span.Seconds()
	}
	if len(lat) > 0 {
		res.P50Ms, res.P99Ms, res.MaxMs = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(lat[len(lat)-1])
	}
	return res
}

// percentile returns the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// renameTopics appends suffix to the topic of every stream of a ruleset
// document.
func renameTopics(src []byte, suffix string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("ruleset is not a mapping")
	}
	n := 0
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "streams" || top.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		streams := top.Content[i+1]
		for j := 1; j < len(streams.Content); j += 2 {
			st := streams.Content[j]
			if st.Kind != yaml.MappingNode {
				continue
			}
			for k := 0; k+1 < len(st.Content); k += 2 {
				if st.Content[k].Value == "topic" {
					st.Content[k+1].Value += suffix
					n++
				}
			}
		}
	}
	if n == 0 {
		return nil, errors.New("ruleset has no stream topics to rename")
	}
	return yaml.Marshal(&doc)
}

// rates formats events/s for the text output.
func rates(rs []float64) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.0f", r)
	}
	return b.String()
}

// printBench prints the results as a table.
func printBench(w io.Writer, c benchConfig, r *benchResult) {
	wl := r.Workload
	fmt.Fprintf(w, "workload: %d events (%d transactions, %d distinct tx ids; %d logins; %d devices; %.1f MB of values),\n"+
		"          %d users, seed %d, %d partitions; ruleset examples/fraud.yaml\n",
		wl.Events, wl.Transactions, wl.TransactionIDs, wl.Logins, wl.Devices, float64(wl.Bytes)/1e6,
		wl.Users, wl.Seed, wl.Partitions)
	fmt.Fprintf(w, "broker:   embedded, in this process, %s, security %s; GOMAXPROCS %d\n", r.Broker, r.Security, r.GOMAXPROCS)
	if r.Load.Events > 0 {
		fmt.Fprintf(w, "inputs:   produced in %.2f s (%.0f events/s; setup, not a result), then %d end markers (one per input partition)\n",
			r.Load.Seconds, r.Load.EventsPerSec, r.EndMarkers)
	}
	fmt.Fprintln(w)

	const rowFmt = "%-34s %8s %8s %10s %10s\n"
	fmt.Fprintf(w, rowFmt, "phase", "events", "seconds", "events/s", "vs replay")
	var replay float64
	if r.Replay != nil {
		replay = r.Replay.EventsPerSec
	}
	row := func(name string, t *benchThroughput) {
		if t == nil {
			fmt.Fprintf(w, rowFmt, name, "-", "-", "-", "-")
			return
		}
		vs := "-"
		if replay > 0 {
			vs = fmt.Sprintf("%.0f%%", 100*t.EventsPerSec/replay)
		}
		fmt.Fprintf(w, rowFmt, name, fmt.Sprint(t.Events), fmt.Sprintf("%.2f", t.Seconds), fmt.Sprintf("%.0f", t.EventsPerSec), vs)
	}
	var notes []string
	var pt, rp *benchThroughput
	if p := r.Passthrough; p != nil {
		pt = &p.benchThroughput
		notes = append(notes, fmt.Sprintf("1: bare franz-go consume→produce with the service's client settings; %d records acknowledged (events + end markers)", p.Produced))
	}
	if p := r.Replay; p != nil {
		rp = &p.benchThroughput
		notes = append(notes, fmt.Sprintf("2: replay.Run in memory, output discarded; %d decisions; GOGC=%d", p.Decisions, p.GOGC))
	}
	if len(r.ReplayRuns) > 1 {
		n := fmt.Sprintf("2, 3: the median of %d alternated runs each; events/s of every run:\n   replay         %s", len(r.ReplayRuns), rates(r.ReplayRuns))
		if len(r.KafkaRuns) > 0 {
			n += "\n   at-least-once  " + rates(r.KafkaRuns)
		}
		if len(r.KafkaRunsExactlyOnce) > 0 {
			n += "\n   exactly-once   " + rates(r.KafkaRunsExactlyOnce)
		}
		notes = append(notes, n)
	}
	row("1 Kafka pass-through ceiling", pt)
	row("2 vigil replay", rp)
	for _, k := range []*benchKafka{r.VigilKafka, r.VigilKafkaExactlyOnce} {
		if k == nil {
			continue
		}
		row("3 Vigil over Kafka, "+k.Delivery, &k.benchThroughput)
		target := ""
		if k.Delivery == kafka.AtLeastOnce {
			target = " (target ≥ 80%)"
		}
		notes = append(notes, fmt.Sprintf("3 %s (%s checkpoints every %s, a base every %d): %.0f%% of replay%s;\n"+
			"   first decision produced %.0f ms after Run, visible to read_committed after %.0f ms;\n"+
			"   %d decisions for %d ids (one per transaction record); %d of %d end markers reached; %d input offsets committed at stop; GOGC=%d",
			k.Delivery, k.Checkpoints, k.interval(), k.CheckpointBaseEvery, k.PercentOfReplay, target,
			k.FirstDecisionMs, k.FirstVisibleMs, k.Decisions, k.DecisionIDs, k.EndMarkers, r.EndMarkers, k.ProcessedAtStop, k.GOGC))
	}
	if r.VigilKafka == nil && r.VigilKafkaExactlyOnce == nil {
		row("3 Vigil over Kafka", nil)
	}
	if q := r.ExactlyOnceRatio; q != nil {
		met := "met"
		if q.MedianRun < q.Goal || q.MedianOfRuns < q.Goal {
			met = "NOT met"
		}
		notes = append(notes, fmt.Sprintf("3 exactly-once / at-least-once throughput: %.2f of the median runs, %.2f the median of the runs' ratios (%s);\n"+
			"   goal ≥ %.2f: %s", q.MedianRun, q.MedianOfRuns, ratios(q.Runs), q.Goal, met))
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w)
	if len(r.Latencies) == 0 {
		fmt.Fprintln(w, "4 event-to-decision latency: not run")
	} else {
		l0 := r.Latencies[0]
		fmt.Fprintf(w, "4 event-to-decision latency at %.0f events/s for %s (fresh topics each; DefaultConfig: linger 0, fetch wait %s, min %d B):\n"+
			"  decision visible to a read_committed consumer − produce call, over every tx id\n",
			l0.Rate, c.latencyDuration, kafka.DefaultConfig.FetchMaxWait, kafka.DefaultConfig.FetchMinBytes)
		const latFmt = "  %-44s %8s %8s %8s %13s %9s %9s\n"
		fmt.Fprintf(w, latFmt, "configuration", "p50 ms", "p99 ms", "max ms", "ids decided", "events/s", "behind ms")
		for _, l := range r.Latencies {
			name := fmt.Sprintf("%s, commit every %s", l.Delivery, l.interval())
			if l.Delivery == kafka.AtLeastOnce {
				name = fmt.Sprintf("%s (%s checkpoints every %s)", l.Delivery, l.Checkpoints, l.interval())
			}
			fmt.Fprintf(w, latFmt, name, fmt.Sprintf("%.2f", l.P50Ms), fmt.Sprintf("%.2f", l.P99Ms), fmt.Sprintf("%.2f", l.MaxMs),
				fmt.Sprintf("%d/%d", l.Decided, l.TransactionIDs), fmt.Sprintf("%.0f", l.AchievedRate), fmt.Sprintf("%.1f", l.MaxBehindMs))
		}
		fmt.Fprintf(w, "  each: %d events (%d users), %d transactions; events/s achieved from the first to the last produce call,\n"+
			"  behind: the most the producer fell behind its schedule; GOGC=%d\n", l0.Events, l0.Users, l0.Transactions, l0.GOGC)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "\nstopped: %s\n", r.Error)
	}
}

// ratios formats ratios as rates formats rates.
func ratios(rs []float64) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.2f", r)
	}
	return b.String()
}
