package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/internal/jsonv"
	"github.com/vigil-cep/vigil/rules"
)

// DefaultMaxRecordBytes caps one input line (a record larger than this goes to
// the DLQ, truncated).
const DefaultMaxRecordBytes = 1 << 20

// dlqRawBytes is how much of an oversized record its DLQ entry keeps.
const dlqRawBytes = 1024

// Config tunes Run. The zero value is ready to use.
type Config struct {
	MaxRecordBytes int // default DefaultMaxRecordBytes
	Decoders       int // parallel line decoders; default GOMAXPROCS
	// Progress, when set, is called about once a second, on Run's
	// goroutine, with the records processed so far.
	Progress func(records int64, elapsed time.Duration)
	// Lookups builds the lookups of the ruleset's enrichments; required when
	// it has any.
	Lookups engine.LookupFactory
}

// Run replays rs over NDJSON input (docs/design.md "Replay input") and writes every
// output record to out, one per line, in processing order. It is the bounded
// case of streaming: at the end of input the watermark jumps to its maximum
// and everything fires. The same input gives the same bytes.
//
// Lines are read and decoded by a small pipeline (a reader and Decoders
// workers, each batch handed on in order), then run by one task per input
// partition, as the service runs them (taskSet). All goroutines have returned
// when Run returns. The stats count what the tasks did, also when Run fails
// (ctx canceled, or in or out failed); errors say which of these it was.
func Run(ctx context.Context, rs *rules.Ruleset, in io.Reader, out io.Writer, cfg Config) (engine.Stats, error) {
	if cfg.MaxRecordBytes <= 0 {
		cfg.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if cfg.Decoders <= 0 {
		cfg.Decoders = runtime.GOMAXPROCS(0)
	}
	w := bufio.NewWriterSize(out, 1<<20)
	var werr error
	tasks := newTaskSet(rs, func(b []byte) {
		if werr == nil {
			_, werr = w.Write(b)
		}
	})
	defer tasks.close()
	defer context.AfterFunc(ctx, tasks.stopRules)() // a cancel ends a rule that runs, and skips the rest
	var en *enricher
	if len(rs.Enrichments) > 0 {
		e, err := engine.NewEnricher(rs, cfg.Lookups)
		if err != nil {
			return engine.Stats{}, err
		}
		defer e.Close()
		en = &enricher{en: e}
	}
	stats := func() engine.Stats {
		s := tasks.stats()
		if en != nil {
			en.stats(&s)
		}
		return s
	}
	names := streamNames(rs)

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ordered := make(chan *batch, 2*cfg.Decoders)
	work := make(chan *batch, 2*cfg.Decoders)
	var wg sync.WaitGroup
	tasks.merged = func(b *batch) { wg.Go(b.release) } // off the path that dispatches batches
	var rerr, eerr error
	wg.Go(func() {
		defer close(ordered)
		defer close(work)
		rerr = readBatches(ctx, in, cfg.MaxRecordBytes, func(b *batch) bool {
			select {
			case ordered <- b:
			case <-ctx.Done():
				return false
			}
			select {
			case work <- b:
				return true
			case <-ctx.Done():
				return false
			}
		})
	})
	for range cfg.Decoders {
		x, err := engine.NewExtractor(rs)
		if err != nil {
			cancel()
			wg.Wait()
			return engine.Stats{}, err
		}
		wg.Go(func() {
			for b := range work {
				b.decode(names, cfg.MaxRecordBytes, x)
				close(b.done)
			}
		})
	}

	start, lastReport := time.Now(), time.Now()
	stopped := false
	for b := range ordered {
		if stopped {
			continue // drain, so that the reader can finish
		}
		select {
		case <-b.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			stopped = true
			continue
		}
		if en != nil {
			if err := en.run(ctx, b); err != nil {
				eerr = err
				stopped = true
				cancel()
				continue
			}
		}
		tasks.run(b)
		if werr != nil {
			stopped = true
			cancel()
			continue
		}
		if cfg.Progress != nil && time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			cfg.Progress(tasks.records, time.Since(start)) // the tasks' own counters are theirs while they run
		}
	}
	cancel()
	wg.Wait()
	if parent.Err() != nil || rerr != nil || eerr != nil || werr != nil {
		tasks.abandon() // the stats read the tasks' counters
	}
	switch {
	case parent.Err() != nil:
		return stats(), parent.Err()
	case rerr != nil:
		return stats(), fmt.Errorf("read input: %w", rerr)
	case eerr != nil:
		return stats(), fmt.Errorf("enrich: %w", eerr)
	case werr != nil:
		return stats(), fmt.Errorf("write output: %w", werr)
	}
	tasks.finish()
	wg.Wait() // the releases of the batches finish merged
	if werr == nil {
		werr = w.Flush()
	}
	if werr != nil {
		return stats(), fmt.Errorf("write output: %w", werr)
	}
	return stats(), nil
}

// batch is a run of input lines, decoded by a worker while the task
// processes earlier batches.
type batch struct {
	text      string
	ends      []int // end offset of each line in text (exclusive, without '\n')
	firstLine int64
	oversized map[int]int // line index -> original length, for lines cut at the cap
	// items are the decoded lines: records, and control records for
	// control (watermark) lines (engine.Record.Control).
	items []engine.Record
	slab  engine.Slab // where its records' slots are
	done  chan struct{}
}

// A batch ends at batchBytes of text or batchLines lines. Each batch ends
// with a barrier (every task finishes its share before the outputs are
// merged), where cores wait for the slowest task: on the standard workload
// batches of 16k lines ran about 10% faster than batches of 4k, for a few
// MB more in flight; 64k lines gained nothing more. The first batches are
// smaller (firstBatchLines, doubling): the tasks wait for the first one to
// be decoded, which matters for a short input.
const (
	batchBytes      = 4 << 20
	batchLines      = 16 << 10
	firstBatchLines = 1 << 10
)

// readChunk is how much readBatches asks its reader for at a time.
const readChunk = 64 << 10

// readBatches splits in into batches of whole lines. It reads straight into
// each batch's buffer, which becomes the batch's text without a copy (the
// batch's records point into it; nothing writes to it once it is handed
// on), and the start of the next line moves on to the next buffer. Lines
// longer than maxRecord are cut: the DLQ keeps their start, and the rest of
// them is skipped rather than buffered.
func readBatches(ctx context.Context, in io.Reader, maxRecord int, send func(*batch) bool) error {
	maxLines, maxBytes := firstBatchLines, batchBytes*firstBatchLines/batchLines
	var (
		buf       []byte // the batch's lines, each ended by '\n', then the start of the next
		ends      []int  // where each line ends in buf: at its '\n', or the end of input
		oversized map[int]int
		start     int       // where the line being read starts in buf
		scan      int       // where the search for its '\n' resumes
		first     int64 = 1 // the batch's first line number
		eof       bool
		scratch   []byte // for skipping the rest of a line over the cap
	)
	newBuffer := func(tail []byte) {
		buf = append(make([]byte, 0, max(maxBytes, len(tail))+readChunk), tail...)
		ends, oversized, start, scan = make([]int, 0, maxLines), nil, 0, 0
	}
	newBuffer(nil)
	flush := func() bool {
		if len(ends) == 0 {
			return true
		}
		b := &batch{text: unsafe.String(unsafe.SliceData(buf), ends[len(ends)-1]), ends: ends, firstLine: first, oversized: oversized, done: make(chan struct{})}
		first += int64(len(ends))
		maxLines, maxBytes = min(2*maxLines, batchLines), min(2*maxBytes, batchBytes)
		newBuffer(buf[min(start, len(buf)):]) // a last line without '\n' ends at len(buf)
		return send(b)
	}
	// cut keeps the first bytes of the line buf[start:end], which is longer
	// than maxRecord, and what follows it; it returns the line's new end.
	cut := func(end int) int {
		if oversized == nil {
			oversized = make(map[int]int)
		}
		oversized[len(ends)] = end - start
		k := start + min(dlqRawBytes, maxRecord+1)
		buf = append(buf[:k], buf[end:]...)
		return k
	}
	// endLine ends the line being read at end, and the batch when it is full.
	endLine := func(end int) bool {
		if _, done := oversized[len(ends)]; !done && end-start > maxRecord {
			end = cut(end)
		}
		ends = append(ends, end)
		start, scan = end+1, end+1
		if end >= maxBytes || len(ends) >= maxLines {
			return flush()
		}
		return true
	}
	for {
		if i := bytes.IndexByte(buf[scan:], '\n'); i >= 0 {
			if !endLine(scan + i) {
				return nil
			}
			continue
		}
		scan = len(buf)
		switch {
		case eof:
			if start < len(buf) && !endLine(len(buf)) { // a last line without '\n'
				return nil
			}
			flush()
			return nil
		case len(buf)-start > maxRecord:
			// Over the cap already: keep the line's start, skip the rest.
			if scratch == nil {
				scratch = make([]byte, readChunk)
			}
			n, rest, atEOF, err := skipLine(in, scratch)
			if err != nil {
				flush()
				return err
			}
			end := cut(len(buf))
			oversized[len(ends)] += n
			buf, eof = append(append(buf, '\n'), rest...), atEOF
			if !endLine(end) {
				return nil
			}
			continue
		case ctx.Err() != nil:
			return nil
		}
		if cap(buf)-len(buf) < readChunk { // a line longer than what is left of the buffer
			buf = append(make([]byte, 0, 2*cap(buf)), buf...)
		}
		n, err := in.Read(buf[len(buf) : len(buf)+readChunk])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			eof = true
		case err != nil:
			flush()
			return err
		}
	}
}

// skipLine reads in up to the next '\n' (into scratch) and returns how many
// bytes came before it, the bytes read after it, and whether input ended.
func skipLine(in io.Reader, scratch []byte) (n int, rest []byte, eof bool, err error) {
	for {
		m, err := in.Read(scratch)
		if err != nil && err != io.EOF {
			return 0, nil, false, err
		}
		if i := bytes.IndexByte(scratch[:m], '\n'); i >= 0 {
			return n + i, scratch[i+1 : m], err == io.EOF, nil
		}
		n += m
		if err == io.EOF {
			return n, nil, true, nil
		}
	}
}

// lines yields the index and text of each line of the batch.
func (b *batch) lines() iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		start := 0
		for i, end := range b.ends {
			if !yield(i, b.text[start:end]) {
				return
			}
			start = end + 1 // past its '\n'
		}
	}
}

// decode parses every line of the batch. It runs on a worker goroutine and
// touches nothing but the batch.
func (b *batch) decode(names map[string]int, maxRecord int, x *engine.Extractor) {
	b.items = getItems(len(b.ends))
	x.UseSlab(&b.slab)
	defer x.UseSlab(nil)
	for i, text := range b.lines() {
		lineNo := b.firstLine + int64(i)
		if n, ok := b.oversized[i]; ok {
			b.items = append(b.items, engine.Record{Stream: -1, Offset: lineNo, Raw: text,
				Err: fmt.Errorf("record is %d bytes, over the limit of %d; raw holds its first %d", n, maxRecord, len(text))})
			continue
		}
		if isBlank(text) {
			continue
		}
		b.items = append(b.items, engine.Record{})
		rec := &b.items[len(b.items)-1]
		parseLine(rec, text, lineNo, names, x)
		if !rec.Control {
			x.Extract(rec)
		}
	}
}

// itemsPool recycles the items of batches that have been run. An item is
// large (a Record) and a batch holds thousands: allocating them afresh for
// every batch was a good part of replay's garbage.
var itemsPool sync.Pool // of *[]engine.Record, empty, cleared

// getItems returns an empty slice with room for n items.
func getItems(n int) []engine.Record {
	if p, ok := itemsPool.Get().(*[]engine.Record); ok && cap(*p) >= n {
		return *p
	}
	return make([]engine.Record, 0, n)
}

// release recycles the batch's items and slots once the tasks have run
// them: nothing keeps a pointer to an item past Task.Process (what outlives
// the record, such as its fields or row, is copied out of it), and the
// enrichments have finished with the batch before the tasks start.
func (b *batch) release() {
	items := b.items
	clear(items)
	items = items[:0]
	b.items = nil
	itemsPool.Put(&items)
	b.slab.Free()
}

func isBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\r':
		default:
			return false
		}
	}
	return true
}

// streamNames maps each stream's name to its index for parseLine; a derived
// stream (a pattern's or join's output), which no line may feed, maps to -1.
func streamNames(rs *rules.Ruleset) map[string]int {
	names := make(map[string]int, len(rs.Streams))
	for i, st := range rs.Streams {
		names[st.Name] = i
		if !st.Input() {
			names[st.Name] = -1
		}
	}
	return names
}

// parseLine reads one replay line into rec: {"stream": s, "value": {...},
// "partition": p, "key": k, "timestamp": ms}, or a control line
// {"watermark": ms, "stream": s, "partition": p} (a control record). x
// decodes the value in the pass that finds its end (Extractor.DecodeValue),
// keeping only the fields its stream's expressions read when the line names
// its "stream" before its "value". A line that cannot be read is a record
// with the reason in Err, of no stream.
func parseLine(rec *engine.Record, text string, lineNo int64, names map[string]int, x *engine.Extractor) {
	*rec = engine.Record{Stream: -1, Offset: lineNo, Raw: text}
	var (
		haveValue, haveWM, havePart, haveStream bool
		part                                    float64
	)
	bad := func(err error) {
		rec.Err = err
		rec.Stream = -1
		rec.Control = false
	}
	n, err := jsonv.Object(text, func(key, rest string) (int, error) {
		switch key {
		case "stream":
			n, err := jsonv.Skip(rest)
			if err != nil {
				return n, err
			}
			if haveStream {
				// The value before it was decoded for the first.
				return n, errors.New(`"stream" given twice`)
			}
			haveStream = true
			if raw := rest[:n]; len(raw) >= 2 && raw[0] == '"' && !strings.ContainsRune(raw, '\\') {
				rec.StreamName = raw[1 : n-1] // the common case, without boxing a decoded value
			} else {
				v, _, _ := jsonv.DecodePrefix(rest)
				s, ok := v.(string)
				if !ok {
					return n, errors.New(`"stream" must be a string`)
				}
				rec.StreamName = s
			}
			// Known now, for decoding a "value" that comes after it.
			if idx, ok := names[rec.StreamName]; ok && idx >= 0 {
				rec.Stream = idx
			} else {
				rec.Stream = -1
			}
			return n, nil
		case "value":
			// Decoded here, in the pass that finds its end, rather than
			// skipped and decoded again: DecodeValue accepts, rejects and
			// measures exactly as Skip does.
			haveValue = true
			return x.DecodeValue(rec, rest)
		case "partition", "timestamp", "watermark":
			f, n, ok, err := jsonv.DecodeNumberPrefix(rest) // the common case, without boxing
			if !ok {
				var v any
				v, n, err = jsonv.DecodePrefix(rest)
				f, ok = v.(float64)
			}
			if err == nil && (!ok || f != math.Trunc(f) || math.Abs(f) > 1<<62) {
				err = fmt.Errorf("%q must be an integer", key)
			}
			switch key {
			case "partition":
				part, havePart = f, true
			case "timestamp":
				rec.Timestamp, rec.HasTimestamp = int64(f), true
			case "watermark":
				rec.Watermark, haveWM = int64(f), true
			}
			return n, err
		case "key":
			return jsonv.Skip(rest)
		}
		return 0, fmt.Errorf("unknown field %q (want stream, value, partition, key, timestamp or watermark)", key)
	})
	if err == nil && !isBlank(text[n:]) {
		err = fmt.Errorf("unexpected text after the record at offset %d", n)
	}
	if err != nil {
		bad(fmt.Errorf("line %d: %w", lineNo, err))
		return
	}
	if havePart {
		if part < 0 || part > math.MaxInt32 {
			bad(fmt.Errorf("line %d: partition %v out of range", lineNo, part))
			return
		}
		rec.Partition = int32(part)
	}
	if rec.StreamName != "" && rec.Stream < 0 {
		if _, derived := names[rec.StreamName]; derived {
			bad(fmt.Errorf("line %d: stream %q is the output of a pattern or join, not an input a line can feed", lineNo, rec.StreamName))
		} else {
			bad(fmt.Errorf("line %d: unknown stream %q", lineNo, rec.StreamName))
		}
		return
	}
	switch {
	case haveWM && haveValue:
		bad(fmt.Errorf("line %d: a line is a record (value) or a control line (watermark), not both", lineNo))
	case haveWM:
		if rec.Stream < 0 && havePart {
			bad(fmt.Errorf("line %d: a watermark for a partition needs its stream", lineNo))
			return
		}
		if !havePart {
			rec.Partition = -1 // every partition
		}
		rec.Control = true
	case !haveValue:
		bad(fmt.Errorf("line %d: missing \"value\"", lineNo))
	case rec.Stream < 0:
		bad(fmt.Errorf("line %d: missing \"stream\"", lineNo))
	}
}
