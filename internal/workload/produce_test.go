package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// refMurmur2 is Kafka's Utils.murmur2, written here from the Java source
// rather than taken from franz-go or the service, so that the test holds
// Produce to Kafka and not to the code it calls.
func refMurmur2(data []byte) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// kafkaPartition is where Kafka's default partitioner puts a keyed record
// (Utils.toPositive(Utils.murmur2(key)) % numPartitions).
func kafkaPartition(key []byte, partitions int) int32 {
	return (refMurmur2(key) & 0x7fffffff) % int32(partitions)
}

// TestRefMurmur2 checks the reference against the vectors of Kafka's
// UtilsTest.testMurmur2.
func TestRefMurmur2(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := refMurmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// startCluster starts a fake Kafka cluster, closed at the test's end, with
// the workload's topics of partitions partitions each (none when 0), and
// returns it with the configuration that reaches it.
func startCluster(t *testing.T, partitions int32) (*kfake.Cluster, kconf.Config) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if partitions > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, Streams()...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, kconf.Config{Brokers: c.ListenAddrs()}
}

// topicPart is one partition of one topic.
type topicPart struct {
	topic string
	part  int32
}

// readTopics reads every record of the workload's topics, each partition in
// offset order, up to the end offsets they have now.
func readTopics(t *testing.T, kc kconf.Config) map[topicPart][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a synchronisation
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Brokers...), kgo.ConsumeTopics(Streams()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, Streams()...)
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left++
		}
	})
	got := make(map[topicPart][]*kgo.Record)
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the topics: %v (%d partitions not read to their end)", ctx.Err(), left)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPart{r.Topic, r.Partition}
			got[tp] = append(got[tp], r)
			if end, _ := ends.Lookup(r.Topic, r.Partition); r.Offset == end.Offset-1 {
				left--
			}
		})
	}
	return got
}

// TestProduce: Produce sends the workload's records to the topics of their
// streams, on the partitions Kafka's default partitioner gives their user_id
// keys, each partition holding its records in the workload's order, with
// record times that never go back in that order; the counts, the values and
// the planted cases are Generate's, and the summary says so.
func TestProduce(t *testing.T) {
	const partitions = 3
	_, kc := startCluster(t, partitions)
	c := Config{Events: 6000, Users: 400, Seed: 7}
	var report bytes.Buffer
	planted, err := Produce(t.Context(), c, kc, SendRate(0), Report(&report, false))
	t.Log(report.String())
	if err != nil {
		t.Fatal(err)
	}
	want, wantPlanted := fileRecords(t, c)
	if diff := cmp.Diff(wantPlanted, planted); diff != "" {
		t.Errorf("planted cases differ (-Generate +Produce):\n%s", diff)
	}
	got := readTopics(t, kc)

	perStream := map[string]int{}
	for _, w := range want {
		perStream[w.Stream]++
	}
	for _, s := range Streams() {
		n := 0
		for p := range int32(partitions) {
			n += len(got[topicPart{s, p}])
		}
		if n != perStream[s] {
			t.Errorf("topic %s: %d records, want %d", s, n, perStream[s])
		}
	}
	wantReport := "vigil gen: 6000 records to kafka " + kc.String() + ": transactions, logins, devices (3 partitions each), as fast as the brokers take them\n"
	if !strings.HasPrefix(report.String(), wantReport) {
		t.Errorf("report does not start with %q:\n%s", wantReport, report.String())
	}
	for _, w := range []string{"vigil gen: 6000 records acknowledged in ", "): transactions " + strconv.Itoa(perStream["transactions"]) +
		", logins " + strconv.Itoa(perStream["logins"]) + ", devices " + strconv.Itoa(perStream["devices"]) + "\n", "\nvigil gen: 0 produce errors\n"} {
		if !strings.Contains(report.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, report.String())
		}
	}

	// Walk the file: each record must be the next one of its topic's
	// partition, that partition being murmur2's for its key.
	next := make(map[topicPart]int)
	var last time.Time
	for i, w := range want {
		tp := topicPart{w.Stream, kafkaPartition([]byte(w.Key), partitions)}
		recs := got[tp]
		j := next[tp]
		if j >= len(recs) {
			t.Fatalf("file record %d (%s, key %s): partition %d of %s holds only %d records", i, w.Stream, w.Key, tp.part, tp.topic, len(recs))
		}
		r := recs[j]
		next[tp] = j + 1
		if string(r.Key) != w.Key || string(r.Value) != w.Value {
			t.Fatalf("file record %d: %s/%d offset %d is key %s value %s; want key %s value %s (wrong partition, or order not kept)",
				i, tp.topic, tp.part, r.Offset, r.Key, r.Value, w.Key, w.Value)
		}
		if r.Timestamp.Before(last) {
			t.Fatalf("file record %d: record time %s before the previous record's %s", i, r.Timestamp, last)
		}
		last = r.Timestamp
	}
}

// TestProduceRate: with a send rate the records go out on the workload's
// clock, sped up, and the summary says how the schedule was kept (no
// assertion on time: the machine may be slow).
func TestProduceRate(t *testing.T) {
	_, kc := startCluster(t, 2)
	// Without planted fraud, which outlasts the short span of a small
	// workload, its clock runs 0.5 s: 50 ms at 10 times real time.
	var report bytes.Buffer
	_, err := Produce(t.Context(), Config{Events: 1000, Users: 100, Fraud: -1}, kc, SendRate(20000), Report(&report, false))
	t.Log(report.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"20000 records/s: the workload's clock at 10 times real time", "1000 records acknowledged", "0 produce errors"} {
		if !strings.Contains(report.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, report.String())
		}
	}
	if !strings.Contains(report.String(), "sent on schedule") && !strings.Contains(report.String(), "fell behind the schedule") {
		t.Errorf("summary does not say how the schedule was kept:\n%s", report.String())
	}
	n := 0
	for _, recs := range readTopics(t, kc) {
		n += len(recs)
	}
	if n != 1000 {
		t.Errorf("%d records on the topics, want 1000", n)
	}
}

// TestProduceRefused: records the broker refuses are counted, named in the
// summary, and make the error.
func TestProduceRefused(t *testing.T) {
	c, kc := startCluster(t, 2)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.BaseOffset = rp.Partition, kerr.InvalidRecord.Code, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	var report bytes.Buffer
	planted, err := Produce(t.Context(), Config{Events: 500, Users: 50}, kc, SendRate(0), Report(&report, false))
	t.Log(report.String())
	if want := "500 of 500 records sent were not acknowledged: 500 refused or timed out"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if planted == nil {
		t.Error("no planted cases: the records were sent, the cases come back")
	}
	for _, w := range []string{"0 records acknowledged", "500 produce errors", "INVALID_RECORD"} {
		if !strings.Contains(report.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, report.String())
		}
	}
}

// cancelOnStart is a report writer that cancels the run when the start line
// is written, just before the first record would be sent.
type cancelOnStart struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnStart) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(" records to kafka ")) {
		w.cancel()
	}
	return w.Buffer.Write(b)
}

// TestProduceInterrupted: once ctx is done no record is sent, the summary
// is written, and the error says how far sending got, with no cases.
func TestProduceInterrupted(t *testing.T) {
	_, kc := startCluster(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	report := &cancelOnStart{cancel: cancel}
	planted, err := Produce(ctx, Config{Events: 100, Users: 10}, kc, SendRate(0), Report(report, false))
	t.Log(report.String())
	if want := "interrupted after 0 of 100 records"; err == nil || err.Error() != want || planted != nil {
		t.Errorf("Produce = %v, %v; want no cases and %q", planted, err, want)
	}
	if !strings.HasSuffix(report.String(), "transactions 0, logins 0, devices 0\nvigil gen: 0 produce errors\n") {
		t.Errorf("summary missing:\n%s", report.String())
	}
	if n := len(readTopics(t, kc)); n != 0 {
		t.Errorf("records on %d partitions, want none sent", n)
	}
}

// TestProduceTopics: Produce creates no topic, and refuses topics that are
// not co-partitioned.
func TestProduceTopics(t *testing.T) {
	c, kc := startCluster(t, 0)
	want := "kafka " + kc.String() + " has no topic transactions, logins, devices: start vigil serve first (it creates its input topics), " +
		"or create transactions, logins, devices with one partition count"
	if _, err := Produce(t.Context(), Config{Events: 100, Users: 10}, kc); err == nil || err.Error() != want {
		t.Errorf("no topics: %v, want %q", err, want)
	}
	for topic, n := range map[string]int32{"transactions": 2, "logins": 2, "devices": 3} {
		if err := c.CreateTopic(topic, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	want = `the topics are not co-partitioned (transactions 2, logins 2, devices 3 partitions): a user's records must land on the same ` +
		`partition number of every topic, which the service reads in one task (docs/design.md, "Architecture")`
	if _, err := Produce(t.Context(), Config{Events: 100, Users: 10}, kc); err == nil || err.Error() != want {
		t.Errorf("not co-partitioned: %v, want %q", err, want)
	}
}

// TestProduceUnreachable: a broker that cannot be reached is one clear error
// at start.
func TestProduceUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var report bytes.Buffer
	_, err = Produce(t.Context(), Config{Events: 100, Users: 10}, kconf.Config{Brokers: []string{addr}}, Report(&report, false))
	if err == nil || !strings.HasPrefix(err.Error(), "kafka "+addr+" via PLAINTEXT: ") {
		t.Errorf("error %v; want one naming the connection", err)
	}
	if report.Len() > 0 {
		t.Errorf("report %q; want nothing before the connection", report.String())
	}
}

// TestProduceInvalid: a bad option, Config or connection setting is refused
// before connecting (no broker listens at the address).
func TestProduceInvalid(t *testing.T) {
	kc := kconf.Config{Brokers: []string{"127.0.0.1:1"}}
	for _, tc := range []struct {
		name string
		c    Config
		kc   kconf.Config
		opts []ProduceOption
		want string
	}{
		{"negative rate", Config{}, kc, []ProduceOption{SendRate(-1)},
			"workload: SendRate must be a finite, non-negative number of records per second, got -1"},
		{"NaN rate", Config{}, kc, []ProduceOption{SendRate(math.NaN())},
			"workload: SendRate must be a finite, non-negative number of records per second, got NaN"},
		{"config", Config{Events: -1}, kc, nil, "workload: Events must not be negative, got -1"},
		{"no brokers", Config{}, kconf.Config{}, nil, "kafka: no bootstrap brokers: give --brokers or bootstrap.servers"},
	} {
		if _, err := Produce(t.Context(), tc.c, tc.kc, tc.opts...); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestProgressLine pins the progress line.
func TestProgressLine(t *testing.T) {
	p := &producer{total: 1000}
	p.sent[kindTx].Store(200)
	p.sent[kindLogin].Store(50)
	p.acked[kindTx].Store(190)
	p.acked[kindDevice].Store(50)
	p.clock.Store(90_500)
	if got, want := p.progressLine(2500*time.Millisecond), "2.5s: sent 250 of 1000 (25%), acknowledged 240, 100 records/s, event time +1m31s"; got != want {
		t.Errorf("progress line\n got %q\nwant %q", got, want)
	}
	p.failed[kindLogin].Store(2)
	p.behind.Store(int64(600 * time.Millisecond))
	if got, want := p.progressLine(2500*time.Millisecond), "2.5s: sent 250 of 1000 (25%), acknowledged 240, 100 records/s, event time +1m31s, 2 failed, 600ms behind the schedule"; got != want {
		t.Errorf("progress line with failures, behind\n got %q\nwant %q", got, want)
	}
}

// chanWriter sends what is written to it on c, which has room for every
// write of a test.
type chanWriter struct{ c chan string }

func (w chanWriter) Write(b []byte) (int, error) {
	w.c <- string(b)
	return len(b), nil
}

// TestStartProgress: progress is a line every Progress period, or on a
// terminal a line redrawn in place every terminalEvery and cleared at the
// end; stop waits for the writer. The bubble's clock moves while the test
// waits for a write, so no real time passes.
func TestStartProgress(t *testing.T) {
	for _, tc := range []struct {
		name     string
		every    time.Duration
		terminal bool
		want     []string // format of each write, %s the progress line at that time
		at       []time.Duration
		end      string
	}{
		{"lines", 2 * time.Second, false, []string{"%s\n", "%s\n"}, []time.Duration{2 * time.Second, 4 * time.Second}, ""},
		{"terminal", time.Hour, true, []string{"\r%s\033[K", "\r%s\033[K"}, []time.Duration{terminalEvery, 2 * terminalEvery}, "\r\033[K"},
	} {
		synctest.Test(t, func(t *testing.T) {
			w := chanWriter{make(chan string, 10)}
			p := &producer{report: w, terminal: tc.terminal, every: tc.every, total: 10, start: time.Now()}
			p.sent[kindTx].Store(4)
			stop := p.startProgress()
			for i, format := range tc.want {
				got := <-w.c
				if want := strings.Replace(format, "%s", p.progressLine(tc.at[i]), 1); got != want {
					t.Errorf("%s: write %d = %q, want %q", tc.name, i, got, want)
				}
			}
			stop()
			close(w.c)
			var end string
			for s := range w.c {
				end += s
			}
			if end != tc.end {
				t.Errorf("%s: after stop %q, want %q", tc.name, end, tc.end)
			}
		})
	}
	// No period and no terminal: no progress.
	w := chanWriter{make(chan string, 1)}
	p := &producer{report: w}
	p.startProgress()()
	if len(w.c) > 0 {
		t.Errorf("progress without a period: %q", <-w.c)
	}
}

// TestSummary pins the summary and the error of each ending.
func TestSummary(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type counts struct{ sent, acked, failed [3]int64 }
	for _, tc := range []struct {
		name     string
		rate     float64
		total    int64
		counts   counts
		canceled int64
		behind   time.Duration
		errs     []string
		flushErr error
		report   string
		err      string
	}{
		{
			name: "as fast as possible", total: 100,
			counts: counts{sent: [3]int64{70, 20, 10}, acked: [3]int64{70, 20, 10}},
			report: "vigil gen: 100 records acknowledged in 2s (50 records/s): transactions 70, logins 20, devices 10\n" +
				"vigil gen: 0 produce errors\n",
		},
		{
			name: "on schedule", rate: 20000, total: 100, behind: 3 * time.Millisecond,
			counts: counts{sent: [3]int64{70, 20, 10}, acked: [3]int64{70, 20, 10}},
			report: "vigil gen: 100 records acknowledged in 2s (50 records/s): transactions 70, logins 20, devices 10\n" +
				"vigil gen: sent on schedule (the workload's clock at 10 times real time, 20000 records/s), at most 3ms behind it, for 1.5s\n" +
				"vigil gen: 0 produce errors\n",
		},
		{
			name: "behind", rate: 30000, total: 100, behind: 700 * time.Millisecond,
			counts: counts{sent: [3]int64{70, 20, 10}, acked: [3]int64{70, 20, 10}},
			report: "vigil gen: 100 records acknowledged in 2s (50 records/s): transactions 70, logins 20, devices 10\n" +
				"vigil gen: sending fell behind the schedule (the workload's clock at 15 times real time, 30000 records/s) by up to 700ms, " +
				"sending for 1.5s: the brokers, or this machine, could not take the records that fast\n" +
				"vigil gen: 0 produce errors\n",
		},
		{
			name: "refused", total: 100, errs: []string{"kafka x: INVALID_RECORD", "kafka x: timed out"},
			counts: counts{sent: [3]int64{70, 20, 10}, acked: [3]int64{67, 19, 10}, failed: [3]int64{3, 1, 0}},
			report: "vigil gen: 96 records acknowledged in 2s (48 records/s): transactions 67, logins 19, devices 10\n" +
				"vigil gen: 4 produce errors (transactions 3, logins 1):\n" +
				"  kafka x: INVALID_RECORD\n" +
				"  kafka x: timed out\n",
			err: "4 of 100 records sent were not acknowledged: 4 refused or timed out",
		},
		{
			name: "interrupted", total: 100, canceled: 5, flushErr: context.DeadlineExceeded,
			counts: counts{sent: [3]int64{40, 15, 5}, acked: [3]int64{35, 10, 5}},
			report: "vigil gen: 50 records acknowledged in 2s (25 records/s): transactions 35, logins 10, devices 5\n" +
				"vigil gen: 0 produce errors\n",
			err: "interrupted after 60 of 100 records\n" +
				"10 of 60 records sent were not acknowledged: 5 canceled by the interruption, 5 unanswered (context deadline exceeded)",
		},
	} {
		var report bytes.Buffer
		p := &producer{report: &report, rate: tc.rate, eventRate: DefaultRate, total: tc.total, start: start}
		for k := range p.sent {
			p.sent[k].Store(tc.counts.sent[k])
			p.acked[k].Store(tc.counts.acked[k])
			p.failed[k].Store(tc.counts.failed[k])
		}
		p.canceled.Store(tc.canceled)
		p.behind.Store(int64(tc.behind))
		for _, e := range tc.errs {
			p.noteErr(errors.New(e))
			p.noteErr(errors.New(e)) // kept once
		}
		err := p.summary(start.Add(1500*time.Millisecond), start.Add(2*time.Second), tc.flushErr)
		if diff := cmp.Diff(tc.report, report.String()); diff != "" {
			t.Errorf("%s: report (-want +got):\n%s", tc.name, diff)
		}
		if got := fmt.Sprint(err); (err == nil) != (tc.err == "") || err != nil && got != tc.err {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}
