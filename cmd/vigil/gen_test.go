package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/kafka"
)

// refMurmur2 is Kafka's Utils.murmur2, written here from the Java source
// rather than taken from franz-go or the service, so that the test holds gen
// to Kafka and not to the code it calls.
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

// genBroker starts an embedded broker with gen's topics, partitions
// partitions each (none when partitions is 0).
func genBroker(t *testing.T, partitions int32) *kafka.Broker {
	t.Helper()
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if partitions > 0 {
		genTopics(t, b, partitions, genStreams...)
	}
	return b
}

// genTopics creates topics with partitions partitions each.
func genTopics(t *testing.T, b *kafka.Broker, partitions int32, topics ...string) {
	t.Helper()
	for _, topic := range topics {
		if err := b.Cluster().CreateTopic(topic, partitions, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// wantRecord is a record of the workload file.
type wantRecord struct {
	stream     string
	key, value []byte
}

// workloadFile returns the records of the workload gen writes for c, in
// file order.
func workloadFile(t *testing.T, c workload.Config) ([]wantRecord, []workload.Planted) {
	t.Helper()
	var buf bytes.Buffer
	planted, err := workload.Generate(&buf, c)
	if err != nil {
		t.Fatal(err)
	}
	var recs []wantRecord
	for line := range bytes.Lines(buf.Bytes()) {
		var l struct {
			Stream string          `json:"stream"`
			Value  json.RawMessage `json:"value"`
		}
		var v struct {
			UserID string `json:"user_id"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(l.Value, &v); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, wantRecord{l.Stream, []byte(v.UserID), l.Value})
	}
	return recs, planted
}

// topicPart is one partition of one topic.
type topicPart struct {
	topic string
	part  int32
}

// readTopics reads every record of the topics, each partition in offset
// order, up to the end offsets they have now.
func readTopics(t *testing.T, addr string, topics ...string) map[topicPart][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a synchronisation
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
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
			t.Fatalf("reading %v: %v (%d partitions not read to their end)", topics, ctx.Err(), left)
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

// TestGenBrokers: gen --brokers produces the workload's records to the
// topics of their streams, on the partitions Kafka's default partitioner
// gives their user_id keys, each partition holding its records in the
// workload's order, with record times that never go back in that order;
// the counts, the values and the planted cases are the file's.
func TestGenBrokers(t *testing.T) {
	const partitions = 3
	b := genBroker(t, partitions)
	truth := filepath.Join(t.TempDir(), "truth.ndjson")
	code, stdout, stderr := runCLI(t, "gen", "--brokers", b.Addr(), "--events", "6000", "--users", "400", "--seed", "7",
		"--send-rate", "0", "--progress", "0", "--truth", truth)
	if code != 0 {
		t.Fatalf("gen --brokers: exit %d\n%s", code, stderr)
	}
	t.Log(stderr)
	if stdout != "" {
		t.Errorf("stdout: %q, want nothing (the records went to Kafka)", stdout)
	}
	want, planted := workloadFile(t, workload.Config{Events: 6000, Users: 400, Seed: 7})
	got := readTopics(t, b.Addr(), genStreams...)

	perStream := map[string]int{}
	for _, w := range want {
		perStream[w.stream]++
	}
	for _, s := range genStreams {
		n := 0
		for p := range int32(partitions) {
			n += len(got[topicPart{s, p}])
		}
		if n != perStream[s] {
			t.Errorf("topic %s: %d records, want %d", s, n, perStream[s])
		}
	}
	for _, w := range []string{"6000 records acknowledged", "transactions " + strconv.Itoa(perStream["transactions"]),
		"logins " + strconv.Itoa(perStream["logins"]), "devices " + strconv.Itoa(perStream["devices"]), "0 produce errors"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("summary lacks %q:\n%s", w, stderr)
		}
	}

	// Walk the file: each record must be the next one of its topic's
	// partition, that partition being murmur2's for its key.
	next := make(map[topicPart]int)
	var last time.Time
	for i, w := range want {
		tp := topicPart{w.stream, kafkaPartition(w.key, partitions)}
		recs := got[tp]
		j := next[tp]
		if j >= len(recs) {
			t.Fatalf("file record %d (%s, key %s): partition %d of %s holds only %d records", i, w.stream, w.key, tp.part, tp.topic, len(recs))
		}
		r := recs[j]
		next[tp] = j + 1
		if !bytes.Equal(r.Key, w.key) || !bytes.Equal(r.Value, w.value) {
			t.Fatalf("file record %d: %s/%d offset %d is key %s value %s; want key %s value %s (wrong partition, or order not kept)",
				i, tp.topic, tp.part, r.Offset, r.Key, r.Value, w.key, w.value)
		}
		if r.Timestamp.Before(last) {
			t.Fatalf("file record %d: record time %s before the previous record's %s", i, r.Timestamp, last)
		}
		last = r.Timestamp
	}

	// The planted cases, as gen writes them to a file.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, p := range planted {
		enc.Encode(p)
	}
	if b, err := os.ReadFile(truth); err != nil || !bytes.Equal(b, buf.Bytes()) {
		t.Errorf("--truth: %v, %d bytes, want the %d bytes of the planted cases", err, len(b), buf.Len())
	}
}

// TestGenBrokersRate: with --send-rate the records go out on the workload's
// clock, sped up, and the summary says how the schedule was kept (no
// assertion on time: the machine may be slow).
func TestGenBrokersRate(t *testing.T) {
	b := genBroker(t, 2)
	// Without planted fraud, which outlasts the short span of a small
	// workload, its clock runs 0.5 s: 50 ms at 10 times real time.
	code, _, stderr := runCLI(t, "gen", "--brokers", b.Addr(), "--send-rate", "20000", "--events", "1000", "--users", "100", "--fraud", "0", "--progress", "0")
	if code != 0 {
		t.Fatalf("gen --brokers --send-rate: exit %d\n%s", code, stderr)
	}
	t.Log(stderr)
	for _, w := range []string{"20000 records/s: the workload's clock at 10 times real time", "1000 records acknowledged", "0 produce errors"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("summary lacks %q:\n%s", w, stderr)
		}
	}
	if !strings.Contains(stderr, "sent on schedule") && !strings.Contains(stderr, "fell behind the schedule") {
		t.Errorf("summary does not say how the schedule was kept:\n%s", stderr)
	}
	n := 0
	for _, recs := range readTopics(t, b.Addr(), genStreams...) {
		n += len(recs)
	}
	if n != 1000 {
		t.Errorf("%d records on the topics, want 1000", n)
	}
}

// TestGenBrokersRefused: records the broker refuses are counted, named in
// the summary, and make the exit status 1.
func TestGenBrokersRefused(t *testing.T) {
	b := genBroker(t, 2)
	c := b.Cluster()
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
	code, _, stderr := runCLI(t, "gen", "--brokers", b.Addr(), "--events", "500", "--users", "50", "--send-rate", "0", "--progress", "0")
	t.Log(stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	for _, w := range []string{"0 records acknowledged", "500 produce errors", "INVALID_RECORD", "500 of 500 records sent were not acknowledged"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("output lacks %q:\n%s", w, stderr)
		}
	}
}

// TestGenBrokersTopics: gen does not create topics, and refuses topics that
// are not co-partitioned.
func TestGenBrokersTopics(t *testing.T) {
	b := genBroker(t, 0)
	code, _, stderr := runCLI(t, "gen", "--brokers", b.Addr(), "--events", "100", "--users", "10")
	if code != 1 || !strings.Contains(stderr, "has no topic transactions, logins, devices: start vigil serve first") {
		t.Errorf("no topics: exit %d, %s", code, stderr)
	}
	genTopics(t, b, 2, "transactions", "logins")
	genTopics(t, b, 3, "devices")
	code, _, stderr = runCLI(t, "gen", "--brokers", b.Addr(), "--events", "100", "--users", "10")
	if code != 1 || !strings.Contains(stderr, "not co-partitioned (transactions 2, logins 2, devices 3 partitions)") {
		t.Errorf("not co-partitioned: exit %d, %s", code, stderr)
	}
}

// TestGenBrokersUnreachable: a broker that cannot be reached is one clear
// error at start.
func TestGenBrokersUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, stderr := runCLI(t, "gen", "--brokers", addr, "--events", "100", "--users", "10")
	if code != 1 || !strings.Contains(stderr, "kafka "+addr+" via PLAINTEXT") {
		t.Errorf("exit %d, %s; want 1 and an error naming the connection", code, stderr)
	}
}

// TestGenFlags: the flags that write files do not go with --brokers, nor
// --send-rate without it.
func TestGenFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--brokers", "127.0.0.1:1", "--out", "x"},
		{"--brokers", "127.0.0.1:1", "--kafka", "logins"},
		{"--brokers", "127.0.0.1:1", "--partitions", "4"},
		{"--brokers", "127.0.0.1:1", "--send-rate", "-1"},
		{"--send-rate", "100"},
	} {
		if code, _, stderr := runCLI(t, append([]string{"gen"}, args...)...); code != 2 {
			t.Errorf("gen %v: exit %d, want 2 (usage)\n%s", args, code, stderr)
		}
	}
}

// A VIGIL_KAFKA_* variable left in the environment does not turn gen into a
// producer: only --brokers or --kafka-properties does.
func TestGenEnvironmentDoesNotProduce(t *testing.T) {
	t.Setenv("VIGIL_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
	code, out, stderr := runCLI(t, "gen", "--events", "300", "--users", "30")
	if code != 0 || !strings.HasPrefix(out, `{"stream":`) {
		t.Fatalf("exit %d, stdout %.80q, stderr %q; want the NDJSON workload on stdout", code, out, stderr)
	}
}
