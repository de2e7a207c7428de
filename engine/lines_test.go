package engine

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
)

// The tests feed tasks replay lines (docs/design.md "Replay input"), as a
// Kafka task gets its records: the golden cases of package replay, and the
// `vigil gen` workload. Package replay imports the engine, so the engine's
// tests cannot use its line reader; testLine reads the same format plainly.

// loadRuleset loads the ruleset document at path.
func loadRuleset(t testing.TB, path string) *rules.Ruleset {
	t.Helper()
	return mustLoad(t, string(mustRead(t, path)))
}

// streamNames maps the names of rs's streams to their indexes.
func streamNames(rs *rules.Ruleset) map[string]int {
	names := make(map[string]int, len(rs.Streams))
	for i, st := range rs.Streams {
		names[st.Name] = i
	}
	return names
}

// testLine reads a replay line into a record: an event with its value
// decoded whole into Fields (not extracted: Process does that), or a control
// record for a control line. A line it cannot read is a record with the
// reason in Err, which Process sends to the DLQ.
func testLine(line string, lineNo int64, names map[string]int) Record {
	rec := Record{Stream: -1, Offset: lineNo, Raw: line}
	var l struct {
		Stream    *string         `json:"stream"`
		Value     json.RawMessage `json:"value"`
		Partition *int32          `json:"partition"`
		Timestamp *int64          `json:"timestamp"`
		Watermark *int64          `json:"watermark"`
	}
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		rec.Err = fmt.Errorf("line %d: %w", lineNo, err)
		return rec
	}
	if l.Stream != nil {
		rec.StreamName = *l.Stream
		idx, ok := names[rec.StreamName]
		if !ok {
			rec.Err = fmt.Errorf("line %d: unknown stream %q", lineNo, rec.StreamName)
			return rec
		}
		rec.Stream = idx
	}
	if l.Partition != nil {
		rec.Partition = *l.Partition
	}
	if l.Timestamp != nil {
		rec.Timestamp, rec.HasTimestamp = *l.Timestamp, true
	}
	switch {
	case l.Watermark != nil && l.Value == nil && (l.Partition == nil || rec.Stream >= 0):
		rec.Control, rec.Watermark = true, *l.Watermark
		if l.Partition == nil {
			rec.Partition = -1 // every partition
		}
		return rec
	case l.Watermark != nil || l.Value == nil || rec.Stream < 0:
		rec.Stream, rec.Err = -1, fmt.Errorf("line %d: neither a record (stream, value) nor a control line (watermark)", lineNo)
		return rec
	}
	rec.Value = string(l.Value)
	v, err := jsonv.Decode(rec.Value)
	if err == nil {
		rec.Fields, err = objectOf(v)
	}
	rec.Err = err
	return rec
}
