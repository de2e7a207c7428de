package replay

import (
	"bytes"
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/rules"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/replay")

// TestReplayGolden runs every testdata/replay/<case>: rules.yaml over
// events.ndjson must give exactly want.ndjson. Review diffs of want.ndjson as
// code: they are the semantics.
func TestReplayGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/replay/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := replayFile(t, filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "events.ndjson"), Config{})
			golden := filepath.Join(dir, "want.ndjson")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./replay -run TestReplayGolden -update to create it)", err)
			}
			if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")); diff != "" {
				t.Errorf("replay output differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func loadRuleset(t testing.TB, path string) *rules.Ruleset {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Load(src)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return rs
}

func replayFile(t testing.TB, rulesPath, eventsPath string, cfg Config) []byte {
	t.Helper()
	rs := loadRuleset(t, rulesPath)
	in, err := os.Open(eventsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	if _, err := Run(context.Background(), rs, in, &out, cfg); err != nil {
		t.Fatalf("replay: %v", err)
	}
	return out.Bytes()
}

// TestArrivalOrders: with decide: watermark, the same events in another
// arrival order across streams give the same decisions, byte for byte
// (docs/design.md "Decisions"). The two arrival_order_* golden cases hold the same
// events in two orders and must want the same bytes; random interleavings of
// their streams (each stream in its own order) must give those bytes too.
func TestArrivalOrders(t *testing.T) {
	dir := "testdata/replay/arrival_order_"
	want, err := os.ReadFile(dir + "logins_first/want.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.ReadFile(dir + "tx_first/want.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, other) {
		t.Fatalf("the two arrival orders want different outputs:\n%s\n%s", want, other)
	}
	rs := loadRuleset(t, dir+"logins_first/rules.yaml")
	events, err := os.ReadFile(dir + "logins_first/events.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(events)), "\n")
	names := map[string]int{}
	for i, st := range rs.Streams {
		names[st.Name] = i
	}
	x, err := engine.NewExtractor(rs)
	if err != nil {
		t.Fatal(err)
	}
	byStream := map[string][]string{}
	var streams []string
	for _, line := range lines {
		var rec engine.Record
		parseLine(&rec, line, 0, names, x)
		name := rec.StreamName
		if byStream[name] == nil {
			streams = append(streams, name)
		}
		byStream[name] = append(byStream[name], line)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for range 50 {
		next := map[string]int{}
		var in strings.Builder
		for range lines {
			var open []string
			for _, s := range streams {
				if next[s] < len(byStream[s]) {
					open = append(open, s)
				}
			}
			s := open[rng.IntN(len(open))]
			in.WriteString(byStream[s][next[s]] + "\n")
			next[s]++
		}
		var out bytes.Buffer
		if _, err := Run(context.Background(), rs, strings.NewReader(in.String()), &out, Config{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("input\n%s\ngave\n%s\nwant\n%s", in.String(), out.Bytes(), want)
		}
	}
}

// TestReplayRefusesDerivedStreams: a line may feed only an input stream. One
// naming a pattern's output stream, or naming its stream twice around its
// value (decoded for the first), goes to the DLQ with the reason; neither
// reaches a task (both used to crash the extractor: a derived stream has no
// key expression).
func TestReplayRefusesDerivedStreams(t *testing.T) {
	rs := loadRuleset(t, "testdata/replay/ato/rules.yaml")
	in := strings.Join([]string{
		`{"stream":"ato","value":{"user_id":"u1","ts":2000}}`,
		`{"stream":"logins","value":{"user_id":"u1","ts":2000},"stream":"ato"}`,
		`{"watermark":5,"stream":"ato"}`,
	}, "\n")
	var out bytes.Buffer
	st, err := Run(t.Context(), rs, strings.NewReader(in), &out, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"error":"line 1: stream \"ato\" is the output of a pattern or join, not an input a line can feed"`,
		`"error":"line 2: \"stream\" given twice"`,
		`"error":"line 3: stream \"ato\" is the output of a pattern or join, not an input a line can feed"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no DLQ record with %s in\n%s", want, out.String())
		}
	}
	if st.DLQ != 3 || st.Records != 3 {
		t.Errorf("stats %+v: want 3 records, all in the DLQ", st)
	}
}

// TestReplayFieldBound: replay decodes values on its own pipeline
// (Extractor.DecodeValue), and refuses, as the task's decoding does, a field
// an expression reads that is longer than max_field_bytes; a long field
// nothing reads does not matter, and the lines after it are read as usual.
func TestReplayFieldBound(t *testing.T) {
	for _, decide := range []string{"true", "watermark"} { // slots, and events decoded whole
		rs, err := rules.Load([]byte(`
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: ` + decide + `, max_future_skew: 0s, max_field_bytes: 8}
rules:
  m: {stream: tx, action: block, when: 'merchant == "acme"'}
`))
		if err != nil {
			t.Fatal(err)
		}
		in := `{"stream":"tx","value":{"tx_id":"t1","user_id":"u1","ts":1,"merchant":"a merchant name","note":"a long note nobody reads"},"partition":0}
{"stream":"tx","value":{"tx_id":"t2","user_id":"u1","ts":2,"merchant":"acme","note":"a long note nobody reads"}}
`
		var out bytes.Buffer
		st, err := Run(t.Context(), rs, strings.NewReader(in), &out, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), `"error":"field \"merchant\" is 17 bytes, more than max_field_bytes (8) of stream tx"`) ||
			!strings.Contains(out.String(), `"id":"t2"`) || st.DLQ != 1 || st.Decisions != 1 {
			t.Errorf("decide: %s: stats %+v, output\n%s", decide, st, out.String())
		}
	}
}
