package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// genStreams are the workload's streams. Over Kafka each goes to the topic of
// its name, the topic a ruleset reads a stream from unless it names another
// (examples/fraud.yaml names these).
var genStreams = []string{"transactions", "logins", "devices"}

func runGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gen", "", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vigil gen [--users N] [--events N] [--seed S] [--partitions P] [--out FILE] [--truth FILE] [--kafka STREAM]\n"+
			"       vigil gen --brokers HOST:PORT,... [--kafka-properties FILE] [--send-rate R] [--users N] [--events N] [--seed S] [--truth FILE]\n\n"+
			"Write a synthetic workload with planted fraud (IP hopping, card testing, account takeover).\n\n"+
			"Without --brokers it is written as NDJSON, vigil replay's input. With --brokers or --kafka-properties (whose\n"+
			"bootstrap.servers names the brokers) it is produced live, the three streams interleaved in the\n"+
			"file's order, to the topics transactions, logins and devices (which must exist: vigil serve creates them),\n"+
			"keyed by user_id and placed as Kafka's default partitioner places keys (murmur2), each record stamped with\n"+
			"the time it is sent. The workload is the file's, flag for flag: --rate is its event-time rate in both cases, and\n"+
			"--send-rate how fast it is sent. Every acknowledgement is awaited; a record not acknowledged makes the exit status 1.\n\n"+
			"Flags:\n")
		fs.PrintDefaults()
	}
	var c workload.Config
	fs.IntVar(&c.Users, "users", workload.DefaultUsers, "distinct users")
	fs.IntVar(&c.Events, "events", workload.DefaultEvents, "records to write")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed: the same flags give the same bytes")
	fs.Int64Var(&c.Start, "start", workload.DefaultStart, "event time of the first event, epoch ms")
	fs.Float64Var(&c.Rate, "rate", workload.DefaultRate, "events per second of event time")
	fs.Float64Var(&c.OutOfOrder, "out-of-order", workload.DefaultOutOfOrder, "fraction of events written late")
	fs.Float64Var(&c.Duplicates, "duplicates", workload.DefaultDuplicates, "fraction of transactions sent twice")
	fs.Float64Var(&c.Fraud, "fraud", workload.DefaultFraud, "fraction of users with a planted fraud case")
	fs.IntVar(&c.Partitions, "partitions", 1, "spread users over this many input partitions (replay runs a task per partition); "+
		"not with --brokers, where the topics' partition counts and the keys place them")
	outPath := fs.String("out", "-", "output file; - writes standard output")
	truthPath := fs.String("truth", "", "also write the planted fraud cases (NDJSON) to this file")
	kafkaStream := fs.String("kafka", "", "write only `STREAM`'s records, as KEY<TAB>VALUE lines for kcat -P -K '\\t' -t TOPIC "+
		"(one topic at a time: --brokers produces all three interleaved)")
	kclient := addKafkaClientFlags(fs, "", "produce the workload to this Kafka cluster (host:port,...) instead of writing it")
	sendRate := fs.Float64("send-rate", genSendRate, "with --brokers: records sent per second, on average. The workload's clock (its ts fields) runs "+
		"send-rate/rate times as fast as real time, on a fixed schedule that a slow broker does not slow down (the summary says if sending "+
		"fell behind it), so a quiet stretch of event time is quiet on the wire too. "+
		"0 sends as fast as the brokers take them, in the file's order but without the time between events: a rule that decides on arrival "+
		"may then see a payment before the logins that came before it, as the service's fetches happen to batch them (ato_spend of examples/fraud.yaml "+
		"may fire less than in replay)")
	progress := fs.Duration("progress", 5*time.Second, "with --brokers, when standard error is not a terminal: a progress line this often (0: none); "+
		"a terminal gets one line kept up to date")
	if err := parse(fs, args); err != nil {
		return err
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// workload.Config reads a zero fraction as "the default" and a negative one
	// as "none": a user who types --fraud 0 means none.
	for name, v := range map[string]*float64{"out-of-order": &c.OutOfOrder, "duplicates": &c.Duplicates, "fraud": &c.Fraud} {
		if set[name] && *v == 0 {
			*v = -1
		}
	}
	// Kafka only when the command line asks for it: a VIGIL_KAFKA_* variable
	// left in the environment must not turn `vigil gen | vigil replay` into a
	// producer that writes nothing to its pipe.
	live := set["brokers"] || set[kafkaPropertiesFlag]
	var kc kconf.Config
	var err error
	if live {
		if kc, err = kclient.config(os.Environ(), nil); err != nil {
			return err
		}
	}
	usage := func(msg string) error {
		fmt.Fprintln(stderr, msg)
		fs.Usage()
		return errUsage
	}
	if live {
		for _, name := range []string{"out", "kafka", "partitions"} {
			if set[name] {
				return usage(fmt.Sprintf("--%s writes a file; with --brokers the workload goes to Kafka", name))
			}
		}
		if math.IsNaN(*sendRate) || math.IsInf(*sendRate, 0) || *sendRate < 0 {
			return usage(fmt.Sprintf("--send-rate must be a finite number of records per second, 0 or more, not %v", *sendRate))
		}
	} else {
		for _, name := range []string{"send-rate", "progress"} {
			if set[name] {
				return usage(fmt.Sprintf("--%s is for --brokers (without, the workload is written to a file)", name))
			}
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	var planted []workload.Planted
	if live {
		g := liveGen{rate: *sendRate, eventRate: c.Rate, progress: *progress, terminal: isTerminal(stderr), stderr: stderr}
		if g.eventRate == 0 {
			g.eventRate = workload.DefaultRate
		}
		if planted, err = g.run(ctx, c, kc); err != nil {
			return err
		}
	} else {
		out := stdout
		var f *os.File
		if *outPath != "-" {
			if f, err = os.Create(*outPath); err != nil {
				return err
			}
			defer f.Close()
			out = f
		}
		if *kafkaStream != "" {
			planted, err = generateForKafka(out, c, *kafkaStream)
		} else {
			planted, err = workload.Generate(out, c)
		}
		if err != nil {
			return err
		}
		if f != nil {
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
	if *truthPath == "" {
		return nil
	}
	return writeTruth(*truthPath, planted)
}

// writeTruth writes the planted fraud cases, one JSON object a line.
func writeTruth(path string, planted []workload.Planted) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, p := range planted {
		if err := enc.Encode(p); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// generateForKafka writes the workload's records of one stream as
// "key<TAB>value" lines, the key being the record's user_id: kcat -K '\t'
// hashes it, so that a user's records land on the same partition number of
// every topic (co-partitioning, docs/design.md "Architecture").
func generateForKafka(out io.Writer, c workload.Config, streamName string) ([]workload.Planted, error) {
	w := bufio.NewWriter(out)
	planted, err := workloadRecords(c, func(stream string, key, value []byte, _ int64) error {
		if stream == streamName {
			w.Write(key)
			w.WriteByte('\t')
			w.Write(value)
			w.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return planted, w.Flush()
}

// workloadRecords generates the workload of c and calls fn with each record,
// in the order of the NDJSON output (the order replay reads them in): its
// stream, its key (the user_id), its value and its event time (ts). key and
// value are fn's to keep. An error of fn stops the generation and is
// returned.
func workloadRecords(c workload.Config, fn func(stream string, key, value []byte, ts int64) error) ([]workload.Planted, error) {
	pr, pw := io.Pipe()
	var planted []workload.Planted
	done := make(chan error, 1)
	go func() {
		p, err := workload.Generate(pw, c)
		planted = p
		pw.CloseWithError(err)
		done <- err
	}()
	stop := func(err error) ([]workload.Planted, error) {
		pr.CloseWithError(err)
		<-done
		return nil, err
	}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Stream string          `json:"stream"`
			Value  json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return stop(fmt.Errorf("workload line: %w", err))
		}
		var v struct {
			UserID string `json:"user_id"`
			TS     int64  `json:"ts"`
		}
		if err := json.Unmarshal(line.Value, &v); err != nil {
			return stop(fmt.Errorf("workload value: %w", err))
		}
		if err := fn(line.Stream, []byte(v.UserID), line.Value, v.TS); err != nil {
			return stop(err)
		}
	}
	if err := sc.Err(); err != nil {
		return stop(err)
	}
	if err := <-done; err != nil {
		return nil, err
	}
	return planted, nil
}

// Producer settings of gen --brokers.
const (
	// genSendRate is the default --send-rate: the default workload's clock
	// at 10 times real time.
	genSendRate = 10 * workload.DefaultRate
	// genMaxBuffered bounds the records sent but not yet acknowledged: a
	// broker slower than the schedule makes sending wait here, and the
	// summary report it.
	genMaxBuffered = 100_000
	// genDeliveryTimeout fails a record the brokers have not acknowledged
	// in this long (franz-go retries until then), so that gen ends.
	genDeliveryTimeout = 2 * time.Minute
	// genInterruptGrace is how long an interrupted gen waits for the
	// acknowledgements of the records already on their way.
	genInterruptGrace = 5 * time.Second
	// genBehind is how far behind its schedule sending may run before the
	// summary says it fell behind.
	genBehind = 500 * time.Millisecond
	// genTerminalEvery is how often the progress line of a terminal is
	// redrawn.
	genTerminalEvery = 250 * time.Millisecond
)

// liveGen produces the workload to Kafka (gen --brokers).
type liveGen struct {
	rate      float64       // records per second sent; 0: as fast as possible
	eventRate float64       // the workload's events per second of event time
	progress  time.Duration // progress line period when stderr is not a terminal; 0: none
	terminal  bool          // stderr is a terminal
	stderr    io.Writer

	total int64 // records the workload has
	start time.Time
	sent  [3]atomic.Int64 // per stream (index into genStreams)
	acked [3]atomic.Int64
	// failed counts the records the brokers refused or that timed out;
	// canceled those failed because gen was interrupted before sending them.
	failed   [3]atomic.Int64
	canceled atomic.Int64
	behind   atomic.Int64 // the most sending ran behind the schedule, ns
	clock    atomic.Int64 // the workload's clock sent so far, ms after its first event

	errMu  sync.Mutex
	errs   []string // the first distinct produce errors
	errSet map[string]bool
}

// run produces the workload of c to the cluster of kc and prints a summary.
func (g *liveGen) run(ctx context.Context, c workload.Config, kc kconf.Config) ([]workload.Planted, error) {
	if err := kc.Validate(); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	opts, err := kc.Opts()
	if err != nil {
		return nil, err
	}
	if err := kc.Check(ctx, opts); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.ClientID("vigil-gen")}, append(opts,
		// Keyed records go where Kafka's default partitioner puts them:
		// murmur2 of the key, sign bit cleared, modulo the partition count,
		// as the Java client's default partitioner, librdkafka's
		// murmur2_random (kcat -X partitioner=murmur2_random) and the
		// service's decision API (kafka.partitionOf) place a key.
		// StickyKeyPartitioner(nil) is franz-go's "exactly how Kafka does";
		// its default partitioner (UniformBytesPartitioner) hashes keyed
		// records the same way. gen_test.go checks it against a reference
		// murmur2 with Kafka's own test vectors.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerLinger(0), // batches form while a request is in flight
		kgo.MaxBufferedRecords(genMaxBuffered),
		kgo.RecordDeliveryTimeout(genDeliveryTimeout),
	)...)...)
	if err != nil {
		return nil, kc.Explain(err)
	}
	defer cl.Close()
	parts, err := genPartitions(ctx, cl, kc)
	if err != nil {
		return nil, err
	}
	g.total = int64(c.Events)
	if g.total == 0 {
		g.total = workload.DefaultEvents
	}
	fmt.Fprintf(g.stderr, "vigil gen: %d records to kafka %s: %s (%d partitions each), %s\n", g.total, kc,
		strings.Join(genStreams, ", "), parts, g.schedule())

	index := make(map[string]int, len(genStreams))
	for i, s := range genStreams {
		index[s] = i
	}
	promise := func(r *kgo.Record, err error) {
		i := index[r.Topic]
		switch {
		case err == nil:
			g.acked[i].Add(1)
		case errors.Is(err, context.Canceled):
			g.canceled.Add(1)
		default:
			g.failed[i].Add(1)
			g.noteErr(kc.Explain(err))
		}
	}
	stopProgress := g.startProgress()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// The schedule follows the workload's clock, sped up: record i is due
	// when the clock, the largest event time of records 0..i (a late
	// record is due with the records written around it), has run
	// (clock - first event time) / speed since the start. Paced by record
	// count instead, the account takeovers the workload plants past the
	// end of its span (20 s to 4 min from the takeover login to the
	// payment, with few other records in between) went out within a few
	// milliseconds: the service took payments of one fetch before the
	// logins of the same fetch, and ato_spend missed them (so may
	// --send-rate 0, which sends without the time between events).
	speed := g.rate / g.eventRate
	first, clock := int64(math.MinInt64), int64(math.MinInt64)
	var lastTS time.Time
	g.start = time.Now()
	planted, genErr := workloadRecords(c, func(stream string, key, value []byte, ts int64) error {
		i, ok := index[stream]
		if !ok {
			return fmt.Errorf("workload stream %q has no topic", stream)
		}
		if first == math.MinInt64 {
			first = ts
		}
		clock = max(clock, ts)
		g.clock.Store(clock - first)
		now := time.Now()
		if g.rate > 0 {
			due := g.start.Add(time.Duration(float64(clock-first) / speed * float64(time.Millisecond)))
			if d := due.Sub(now); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					timer.Stop()
					return ctx.Err()
				}
				now = time.Now()
			}
			if late := now.Sub(due); late > time.Duration(g.behind.Load()) {
				g.behind.Store(int64(late))
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// The record's timestamp is when it is sent, never earlier than
		// the one before it: a live producer's clock. The service measures
		// idleness and future skew on its own clock, not on record times,
		// and replay of gen's file has no record times, so stamping event
		// times would not make the two see the same thing; it would make
		// event-to-decision latency (from the record time) months long,
		// and have a cluster's time retention delete the records at once.
		// Event time is in the value's ts field, where the rules read it;
		// a backtest over the topics, which orders records by their time,
		// reads them in gen's order.
		if now.Before(lastTS) {
			now = lastTS
		}
		lastTS = now
		g.sent[i].Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: stream, Key: key, Value: value, Timestamp: now}, promise)
		return nil
	})
	sendEnd := time.Now()
	// Wait for every acknowledgement; an interrupted run waits a moment for
	// those of the records already on their way (the rest fail at once).
	fctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(context.Background(), genInterruptGrace)
		defer cancel()
	}
	flushErr := cl.Flush(fctx)
	end := time.Now()
	stopProgress()
	if genErr != nil && !errors.Is(genErr, context.Canceled) {
		return nil, genErr
	}
	return planted, g.summary(sendEnd, end, flushErr)
}

// genPartitions returns the partition count of gen's topics, which must
// exist (gen does not create topics: a topic auto-created with the broker's
// default count could split a user's records over partition numbers that
// the service reads in different tasks) and have one count (co-partitioned).
func genPartitions(ctx context.Context, cl *kgo.Client, kc kconf.Config) (int32, error) {
	md, err := kadm.NewClient(cl).ListTopics(ctx, genStreams...)
	if err != nil {
		return 0, kc.Explain(fmt.Errorf("list topics: %w", err))
	}
	var missing, counts []string
	n := int32(-1)
	same := true
	for _, topic := range genStreams {
		d, ok := md[topic]
		if !ok || !md.Has(topic) {
			missing = append(missing, topic)
			continue
		}
		if d.Err != nil {
			return 0, kc.Explain(fmt.Errorf("topic %s: %w", topic, d.Err))
		}
		p := int32(len(d.Partitions))
		counts = append(counts, fmt.Sprintf("%s %d", topic, p))
		if n >= 0 && p != n {
			same = false
		}
		n = p
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("kafka %s has no topic %s: start vigil serve first (it creates its input topics), "+
			"or create %s with one partition count", kc, strings.Join(missing, ", "), strings.Join(genStreams, ", "))
	}
	if !same {
		return 0, fmt.Errorf("the topics are not co-partitioned (%s partitions): a user's records must land on the same "+
			"partition number of every topic, which the service reads in one task (docs/design.md, \"Architecture\")", strings.Join(counts, ", "))
	}
	return n, nil
}

// schedule describes the send rate.
func (g *liveGen) schedule() string {
	if g.rate <= 0 {
		return "as fast as the brokers take them"
	}
	return fmt.Sprintf("%s records/s: the workload's clock at %s times real time", fmtRate(g.rate), fmtSpeed(g.rate/g.eventRate))
}

// noteErr keeps the first few distinct produce errors for the summary.
func (g *liveGen) noteErr(err error) {
	g.errMu.Lock()
	defer g.errMu.Unlock()
	if g.errSet == nil {
		g.errSet = make(map[string]bool)
	}
	if msg := err.Error(); !g.errSet[msg] && len(g.errs) < 5 {
		g.errSet[msg] = true
		g.errs = append(g.errs, msg)
	}
}

func sum(a *[3]atomic.Int64) int64 {
	var n int64
	for i := range a {
		n += a[i].Load()
	}
	return n
}

// startProgress prints progress on stderr until the function it returns is
// called: a line redrawn in place on a terminal, else a line every
// g.progress (none when 0).
func (g *liveGen) startProgress() (stop func()) {
	every := g.progress
	if g.terminal {
		every = genTerminalEvery
	}
	if every <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				if g.terminal {
					fmt.Fprint(g.stderr, "\r\033[K")
				}
				return
			case <-t.C:
			}
			sent, acked := sum(&g.sent), sum(&g.acked)
			elapsed := time.Since(g.start)
			line := fmt.Sprintf("%.1fs: sent %d of %d (%.0f%%), acknowledged %d, %s records/s, event time +%s", elapsed.Seconds(), sent, g.total,
				100*float64(sent)/float64(max(g.total, 1)), acked, fmtRate(float64(sent)/elapsed.Seconds()),
				(time.Duration(g.clock.Load()) * time.Millisecond).Round(time.Second))
			if f := sum(&g.failed); f > 0 {
				line += fmt.Sprintf(", %d failed", f)
			}
			if b := time.Duration(g.behind.Load()); b >= genBehind {
				line += fmt.Sprintf(", %s behind the schedule", b.Round(time.Millisecond))
			}
			if g.terminal {
				fmt.Fprintf(g.stderr, "\r%s\033[K", line)
			} else {
				fmt.Fprintln(g.stderr, line)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// summary prints what was produced, and returns an error when a record was
// not acknowledged (refused, timed out, or left by an interruption).
func (g *liveGen) summary(sendEnd, end time.Time, flushErr error) error {
	took := end.Sub(g.start)
	sent, acked, failed, canceled := sum(&g.sent), sum(&g.acked), sum(&g.failed), g.canceled.Load()
	var per []string
	for i, s := range genStreams {
		per = append(per, fmt.Sprintf("%s %d", s, g.acked[i].Load()))
	}
	fmt.Fprintf(g.stderr, "vigil gen: %d records acknowledged in %s (%s records/s): %s\n",
		acked, took.Round(time.Millisecond), fmtRate(float64(acked)/took.Seconds()), strings.Join(per, ", "))
	if g.rate > 0 && sent > 0 {
		sending := sendEnd.Sub(g.start)
		behind := time.Duration(g.behind.Load())
		if behind >= genBehind {
			fmt.Fprintf(g.stderr, "vigil gen: sending fell behind the schedule (the workload's clock at %s times real time, %s records/s) by up to %s, "+
				"sending for %s: the brokers, or this machine, could not take the records that fast\n",
				fmtSpeed(g.rate/g.eventRate), fmtRate(g.rate), behind.Round(time.Millisecond), sending.Round(time.Millisecond))
		} else {
			fmt.Fprintf(g.stderr, "vigil gen: sent on schedule (the workload's clock at %s times real time, %s records/s), "+
				"at most %s behind it, for %s\n", fmtSpeed(g.rate/g.eventRate), fmtRate(g.rate), behind.Round(time.Millisecond), sending.Round(time.Millisecond))
		}
	}
	if failed > 0 {
		var by []string
		for i, s := range genStreams {
			if f := g.failed[i].Load(); f > 0 {
				by = append(by, fmt.Sprintf("%s %d", s, f))
			}
		}
		fmt.Fprintf(g.stderr, "vigil gen: %d produce errors (%s):\n", failed, strings.Join(by, ", "))
		g.errMu.Lock()
		for _, e := range g.errs {
			fmt.Fprintf(g.stderr, "  %s\n", e)
		}
		g.errMu.Unlock()
	} else {
		fmt.Fprintln(g.stderr, "vigil gen: 0 produce errors")
	}
	var errs []error
	if sent < g.total {
		errs = append(errs, fmt.Errorf("interrupted after %d of %d records", sent, g.total))
	}
	if missing := sent - acked; missing > 0 {
		why := []string{}
		if failed > 0 {
			why = append(why, fmt.Sprintf("%d refused or timed out", failed))
		}
		if canceled > 0 {
			why = append(why, fmt.Sprintf("%d canceled by the interruption", canceled))
		}
		if rest := missing - failed - canceled; rest > 0 {
			why = append(why, fmt.Sprintf("%d unanswered (%v)", rest, flushErr))
		}
		errs = append(errs, fmt.Errorf("%d of %d records sent were not acknowledged: %s", missing, sent, strings.Join(why, ", ")))
	}
	return errors.Join(errs...)
}

// fmtRate formats a rate without decimals.
func fmtRate(r float64) string { return fmt.Sprintf("%.0f", r) }

// fmtSpeed formats a speed-up factor.
func fmtSpeed(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) }
