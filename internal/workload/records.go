package workload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Records validates c, generates its workload and calls fn with each record
// in the order Generate writes the lines (the order replay reads them in):
// its stream, its key (the user_id, the key Kafka partitions it by), its
// value (the line's "value", byte for byte) and its event time (the value's
// ts). key and value are fn's to keep. fn runs on the caller's goroutine; an
// error of fn stops the generation and comes back as it is, with no cases.
// Otherwise Records returns the planted fraud cases, as Generate does.
// c.Partitions changes nothing: a record's partition is its key's.
func Records(c Config, fn func(stream string, key, value []byte, ts int64) error) ([]Planted, error) {
	return records(c, func(k streamKind, key, value []byte, ts int64) error {
		return fn(streamNames[k], key, value, ts)
	})
}

// records is Records with the stream as its kind.
func records(c Config, fn func(k streamKind, key, value []byte, ts int64) error) ([]Planted, error) {
	g, err := newGenerator(c)
	if err != nil {
		return nil, err
	}
	return g.generate(func(e event) error {
		key := appendPadded(append(make([]byte, 0, 8), 'u'), e.user, 6)
		return fn(e.kind, key, appendValue(nil, &e), e.ts)
	})
}

// GenerateKcat writes the records of the workload of c that belong to
// stream, as "key<TAB>value" lines (vigil gen --kafka), the key being the
// record's user_id: kcat -P -K '\t' hashes it, so that a user's records land
// on the same partition number of every topic (co-partitioning,
// docs/design.md "Architecture"). A stream the workload does not have gets no
// lines. It returns the planted fraud cases; on error (c's validation, or
// the first write error, unwrapped) none.
func GenerateKcat(w io.Writer, c Config, stream string) ([]Planted, error) {
	out := bufio.NewWriter(w)
	planted, err := Records(c, func(s string, key, value []byte, _ int64) error {
		if s != stream {
			return nil
		}
		// A write error sticks in out: the last write returns it, and
		// stops the generation.
		out.Write(key)
		out.WriteByte('\t')
		out.Write(value)
		return out.WriteByte('\n')
	})
	if err != nil {
		return nil, err
	}
	return planted, out.Flush()
}

// WriteTruthFile creates the file path and writes the planted fraud cases to
// it, one JSON object a line (vigil gen --truth). The errors of creating,
// writing and closing the file come back as they are, except the last
// buffered write's, which names the path.
func WriteTruthFile(path string, planted []Planted) error {
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
