package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// DefaultSendRate is the records Produce sends a second without a SendRate
// option: the default workload's clock at 10 times real time.
const DefaultSendRate = 10 * DefaultRate

// Producer settings of Produce.
const (
	// maxBuffered bounds the records sent but not yet acknowledged: a
	// broker slower than the schedule makes sending wait here, and the
	// summary report it.
	maxBuffered = 100_000
	// deliveryTimeout fails a record the brokers have not acknowledged in
	// this long (franz-go retries until then), so that Produce ends.
	deliveryTimeout = 2 * time.Minute
	// interruptGrace is how long an interrupted Produce waits for the
	// acknowledgements of the records already on their way.
	interruptGrace = 5 * time.Second
)

// ProduceOption configures Produce.
type ProduceOption interface{ apply(*producer) }

type produceOptionFunc func(*producer)

func (f produceOptionFunc) apply(p *producer) { f(p) }

// SendRate sets how many records Produce sends a second, on average
// (default DefaultSendRate). The workload's clock (its ts fields) then runs
// rate/Config.Rate times as fast as real time, on a fixed schedule that a
// slow broker does not slow down (the summary says if sending fell behind
// it), so that a quiet stretch of event time is quiet on the wire too. 0
// sends as fast as the brokers take the records, in order but without the
// time between events. Produce refuses a negative rate, NaN or an infinity.
func SendRate(rate float64) ProduceOption {
	return produceOptionFunc(func(p *producer) { p.rate = rate })
}

// Report makes Produce write its start line, its progress and its summary,
// the lines of `vigil gen --brokers`, to w (default: nowhere). terminal says
// that w is a terminal: the progress is then one line redrawn in place four
// times a second, whatever Progress says. Only Produce's goroutines write to
// w, one at a time.
func Report(w io.Writer, terminal bool) ProduceOption {
	return produceOptionFunc(func(p *producer) { p.report, p.terminal = w, terminal })
}

// Progress makes Produce write a progress line to the Report writer every
// d, when that writer is not a terminal. 0 or less, the default, writes none.
func Progress(every time.Duration) ProduceOption {
	return produceOptionFunc(func(p *producer) { p.every = every })
}

// Produce produces the workload of c live to the Kafka cluster of kc: it is
// what `vigil gen --brokers` runs. Every record of Records goes, in that
// order, to the topic of its stream (Streams), keyed by its user_id and
// placed as Kafka's default partitioner places keys (murmur2), with the time
// it is sent as its timestamp, never earlier than the record's before it.
// The topics must exist with one partition count: Produce creates none, as
// a topic auto-created with a broker's default count could split a user's
// records over partition numbers that the service reads in different tasks.
//
// Produce returns when every record sent has been acknowledged or has
// failed: a record not acknowledged in 2 minutes fails, and once ctx is
// canceled sending stops and the records already on their way have 5 s
// more. It then writes the summary (Report) and returns the planted fraud
// cases, as Generate does, with an error when a record sent was not
// acknowledged or the cancellation left records unsent (the cases are nil
// then). Before sending, it returns the error of an option, of c's or kc's
// validation, of the connection (a sentence of kconf.Config.Explain), or of
// the topics; while sending, any other error that stops it (ctx's deadline)
// comes back at once, without a summary.
//
// Goroutines: generation and sending run on the caller's goroutine. The
// franz-go client's goroutines, whose acknowledgement callbacks only count,
// and the progress writer's are stopped before Produce returns.
func Produce(ctx context.Context, c Config, kc kconf.Config, opts ...ProduceOption) ([]Planted, error) {
	p := &producer{rate: DefaultSendRate, report: io.Discard}
	for _, o := range opts {
		o.apply(p)
	}
	if math.IsNaN(p.rate) || math.IsInf(p.rate, 0) || p.rate < 0 {
		return nil, fmt.Errorf("workload: SendRate must be a finite, non-negative number of records per second, got %v", p.rate)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	d := c.withDefaults()
	p.eventRate, p.total = d.Rate, int64(d.Events)
	return p.run(ctx, c, kc)
}

// producer is the state of one Produce call. The sending goroutine, the
// client's acknowledgement callbacks and the progress goroutine share its
// counters (atomics) and mu.
type producer struct {
	rate     float64       // records per second sent; 0: as fast as possible
	every    time.Duration // progress line period when report is not a terminal; 0: none
	report   io.Writer
	terminal bool // report is a terminal

	eventRate float64 // the workload's events per second of event time
	total     int64   // records the workload has
	start     time.Time
	sent      [len(streamNames)]atomic.Int64 // per stream kind
	acked     [len(streamNames)]atomic.Int64
	// failed counts the records the brokers refused or that timed out;
	// canceled those failed because ctx ended before they were sent.
	failed   [len(streamNames)]atomic.Int64
	canceled atomic.Int64
	behind   atomic.Int64 // the most sending ran behind the schedule, ns
	clock    atomic.Int64 // the workload's clock sent so far, ms after its first event

	mu struct {
		sync.Mutex
		errs []string // the first distinct produce errors
		seen map[string]bool
	}
}

// run connects to the cluster of kc and produces the workload of c to it.
func (p *producer) run(ctx context.Context, c Config, kc kconf.Config) ([]Planted, error) {
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
		// records the same way. produce_test.go checks it against a
		// reference murmur2 with Kafka's own test vectors.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerLinger(0), // batches form while a request is in flight
		kgo.MaxBufferedRecords(maxBuffered),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
	)...)...)
	if err != nil {
		return nil, kc.Explain(err)
	}
	defer cl.Close()
	parts, err := topicPartitions(ctx, cl, kc)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(p.report, "vigil gen: %d records to kafka %s: %s (%d partitions each), %s\n", p.total, kc,
		strings.Join(streamNames[:], ", "), parts, p.schedule())

	var promises [len(streamNames)]func(*kgo.Record, error)
	for k := range promises {
		promises[k] = func(_ *kgo.Record, err error) {
			switch {
			case err == nil:
				p.acked[k].Add(1)
			case errors.Is(err, context.Canceled):
				p.canceled.Add(1)
			default:
				p.failed[k].Add(1)
				p.noteErr(kc.Explain(err))
			}
		}
	}
	stopProgress := p.startProgress()
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
	// SendRate(0), which sends without the time between events).
	speed := p.rate / p.eventRate
	first, clock := int64(math.MinInt64), int64(math.MinInt64)
	var lastTS time.Time
	p.start = time.Now()
	planted, genErr := records(c, func(k streamKind, key, value []byte, ts int64) error {
		if first == math.MinInt64 {
			first = ts
		}
		clock = max(clock, ts)
		p.clock.Store(clock - first)
		now := time.Now()
		if p.rate > 0 {
			due := p.start.Add(time.Duration(float64(clock-first) / speed * float64(time.Millisecond)))
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
			if late := now.Sub(due); late > time.Duration(p.behind.Load()) {
				p.behind.Store(int64(late))
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// The record's timestamp is when it is sent, never earlier than
		// the one before it: a live producer's clock. The service measures
		// idleness and future skew on its own clock, not on record times,
		// and replay of Generate's output has no record times, so stamping
		// event times would not make the two see the same thing; it would
		// make event-to-decision latency (from the record time) months
		// long, and have a cluster's time retention delete the records at
		// once. Event time is in the value's ts field, where the rules read
		// it; a backtest over the topics, which orders records by their
		// time, reads them in Generate's order.
		if now.Before(lastTS) {
			now = lastTS
		}
		lastTS = now
		p.sent[k].Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: streamNames[k], Key: key, Value: value, Timestamp: now}, promises[k])
		return nil
	})
	sendEnd := time.Now()
	// Wait for every acknowledgement; an interrupted run waits a moment for
	// those of the records already on their way (the rest fail at once).
	fctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(context.Background(), interruptGrace)
		defer cancel()
	}
	flushErr := cl.Flush(fctx)
	end := time.Now()
	stopProgress()
	if genErr != nil && !errors.Is(genErr, context.Canceled) {
		return nil, genErr
	}
	return planted, p.summary(sendEnd, end, flushErr)
}

// topicPartitions returns the partition count of the workload's topics,
// which must exist (see Produce) and have one count (co-partitioned).
func topicPartitions(ctx context.Context, cl *kgo.Client, kc kconf.Config) (int32, error) {
	md, err := kadm.NewClient(cl).ListTopics(ctx, streamNames[:]...)
	if err != nil {
		return 0, kc.Explain(fmt.Errorf("list topics: %w", err))
	}
	var missing, counts []string
	n := int32(-1)
	same := true
	for _, topic := range streamNames {
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
			"or create %s with one partition count", kc, strings.Join(missing, ", "), strings.Join(streamNames[:], ", "))
	}
	if !same {
		return 0, fmt.Errorf("the topics are not co-partitioned (%s partitions): a user's records must land on the same "+
			"partition number of every topic, which the service reads in one task (docs/design.md, \"Architecture\")", strings.Join(counts, ", "))
	}
	return n, nil
}
