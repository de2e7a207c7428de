package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fileRecord is a record as a line of Generate's output holds it.
type fileRecord struct {
	Stream     string
	Key, Value string
	TS         int64
}

// fileRecords returns the records of the workload Generate writes for c, in
// line order, and its planted cases.
func fileRecords(t *testing.T, c Config) ([]fileRecord, []Planted) {
	t.Helper()
	out, planted := generate(t, c)
	var recs []fileRecord
	for line := range bytes.Lines(out) {
		var l struct {
			Stream string          `json:"stream"`
			Value  json.RawMessage `json:"value"`
		}
		var v struct {
			UserID string `json:"user_id"`
			TS     int64  `json:"ts"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(l.Value, &v); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, fileRecord{l.Stream, v.UserID, string(l.Value), v.TS})
	}
	return recs, planted
}

// TestRecords: Records yields the lines of Generate, in order, as stream,
// key (user_id), value (byte for byte) and ts, and the same planted cases,
// whatever the Partitions of the lines.
func TestRecords(t *testing.T) {
	c := Config{Users: 300, Events: 5000, Seed: 4, Partitions: 3}
	want, wantPlanted := fileRecords(t, c)
	var got []fileRecord
	planted, err := Records(c, func(stream string, key, value []byte, ts int64) error {
		got = append(got, fileRecord{stream, string(key), string(value), ts})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records differ from the lines (-lines +records):\n%s", diff)
	}
	if diff := cmp.Diff(wantPlanted, planted); diff != "" {
		t.Errorf("planted cases differ (-Generate +Records):\n%s", diff)
	}
}

// TestRecordsKeep: key and value are the callback's to keep (Produce hands
// them to the client, which sends them later).
func TestRecordsKeep(t *testing.T) {
	c := Config{Users: 50, Events: 500, Seed: 2}
	var keys, values [][]byte
	if _, err := Records(c, func(_ string, key, value []byte, _ int64) error {
		keys, values = append(keys, key), append(values, value)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want, _ := fileRecords(t, c)
	for i, w := range want {
		if string(keys[i]) != w.Key || string(values[i]) != w.Value {
			t.Fatalf("record %d kept as key %s value %s, want key %s value %s", i, keys[i], values[i], w.Key, w.Value)
		}
	}
}

// TestRecordsStop: the callback's error stops the generation and comes back
// as it is, with no cases; Config's validation error comes back before any
// record.
func TestRecordsStop(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	planted, err := Records(Config{Users: 50, Events: 500}, func(string, []byte, []byte, int64) error {
		calls++
		if calls == 10 {
			return stop
		}
		return nil
	})
	if err != stop || planted != nil || calls != 10 {
		t.Errorf("Records = %v, %v after %d calls; want the callback's error, no cases, after 10 calls", planted, err, calls)
	}
	_, err = Records(Config{Events: -1}, func(string, []byte, []byte, int64) error {
		t.Fatal("a record of an invalid Config")
		return nil
	})
	if want := "workload: Events must not be negative, got -1"; err == nil || err.Error() != want {
		t.Errorf("invalid Config: %v, want %q", err, want)
	}
}

// TestGenerateKcat: the lines of one stream are its records' key<TAB>value,
// in the file's order; a stream the workload does not have gets none.
func TestGenerateKcat(t *testing.T) {
	c := Config{Users: 100, Events: 2000, Seed: 5, Partitions: 2}
	recs, wantPlanted := fileRecords(t, c)
	for _, stream := range append(Streams(), "payments") {
		var want strings.Builder
		for _, r := range recs {
			if r.Stream == stream {
				want.WriteString(r.Key + "\t" + r.Value + "\n")
			}
		}
		var got bytes.Buffer
		planted, err := GenerateKcat(&got, c, stream)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.String(), got.String()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", stream, diff)
		}
		if diff := cmp.Diff(wantPlanted, planted); diff != "" {
			t.Errorf("%s: planted cases differ (-Generate +GenerateKcat):\n%s", stream, diff)
		}
	}
	if _, err := GenerateKcat(failingWriter{}, c, "transactions"); err == nil || err.Error() != "disk full" {
		t.Errorf("write error: %v, want disk full", err)
	}
}

// TestWriteTruthFile: one JSON object a line, each a planted case; a file
// that cannot be created is the error of creating it.
func TestWriteTruthFile(t *testing.T) {
	_, planted := generate(t, Config{Users: 300, Events: 5000, Seed: 4})
	if len(planted) == 0 {
		t.Fatal("no planted cases to write")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "truth.ndjson")
	if err := WriteTruthFile(path, planted); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []Planted
	for line := range bytes.Lines(b) {
		var p Planted
		if err := json.Unmarshal(line, &p); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, p)
	}
	if diff := cmp.Diff(planted, got); diff != "" {
		t.Errorf("truth file (-planted +read back):\n%s", diff)
	}
	missing := filepath.Join(dir, "no", "truth.ndjson")
	if err := WriteTruthFile(missing, planted); err == nil || err.Error() != "open "+missing+": no such file or directory" {
		t.Errorf("missing directory: %v", err)
	}
}

// TestStreams: the stream names, in a slice of the caller's.
func TestStreams(t *testing.T) {
	s := Streams()
	if diff := cmp.Diff([]string{"transactions", "logins", "devices"}, s); diff != "" {
		t.Errorf("Streams (-want +got):\n%s", diff)
	}
	s[0] = "x"
	if Streams()[0] != "transactions" {
		t.Error("changing the returned slice changed the streams")
	}
}
