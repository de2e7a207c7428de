package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/vigil-cep/vigil/asyncio"
	"github.com/vigil-cep/vigil/rules"
)

// LookupFactory builds the lookup behind one enrichment (Redis, HTTP). The
// binary wires the real clients; tests may pass in-process lookups.
type LookupFactory func(e *rules.Enrichment) (asyncio.Lookup, error)

// Enricher runs a ruleset's enrichments (docs/design.md "Async enrichment"). Each
// batch's records are looked up concurrently, up to each enrichment's
// capacity, and their results merged under the enrichment's name before the
// batch reaches the task: output order, and so watermarks, stay those of
// the input whether an enrichment is ordered or not.
//
// One goroutine drives it (replay's, or a live task's); one reader goroutine
// per enrichment collects results; Close stops them all.
type Enricher struct {
	x   *Extractor // key expressions and re-projection, on the driving goroutine
	ops []*enrichOp
}

type enrichOp struct {
	e    *rules.Enrichment
	op   *asyncio.Operator
	mu   sync.Mutex
	got  sync.Cond        // signalled by the reader on each result, with mu
	outs []asyncio.Output // results not yet merged
	wg   sync.WaitGroup   // the reader
}

// NewEnricher returns the enrichments of rs for a driver (a live task, a
// replay), which calls Enrich on each batch of its records before processing
// them. Close stops its lookups.
func NewEnricher(rs *rules.Ruleset, lookups LookupFactory) (*Enricher, error) {
	x, err := NewExtractor(rs)
	if err != nil {
		return nil, err
	}
	en := &Enricher{x: x}
	for _, e := range rs.Enrichments {
		if lookups == nil {
			en.Close()
			return nil, fmt.Errorf("enrichment %s: no lookup configured (vigil replay --redis ADDR for Redis)", e.Name)
		}
		l, err := lookups(e)
		if err != nil {
			en.Close()
			return nil, fmt.Errorf("enrichment %s: %w", e.Name, err)
		}
		op, err := asyncio.New(l, e.Config)
		if err != nil {
			en.Close()
			return nil, fmt.Errorf("enrichment %s: %w", e.Name, err)
		}
		eo := &enrichOp{e: e, op: op}
		eo.got.L = &eo.mu
		eo.wg.Go(func() {
			for out := range op.Results() {
				eo.mu.Lock()
				eo.outs = append(eo.outs, out)
				eo.got.Broadcast()
				eo.mu.Unlock()
			}
		})
		en.ops = append(en.ops, eo)
	}
	return en, nil
}

// Enrich extracts the records (decode, key, time, id) and merges each
// enrichment's result under its name, enrichment after enrichment (a later
// one may read an earlier one's result in its key). Lookups run
// concurrently, up to each enrichment's capacity; Enrich returns when all
// are merged, so the records keep their order. A record whose key cannot be
// computed gets the error (it goes to the DLQ).
func (en *Enricher) Enrich(ctx context.Context, recs []*Record) error {
	for _, rec := range recs {
		if !rec.extracted {
			en.x.Extract(rec)
		}
	}
	touched := false
	for i, eo := range en.ops {
		n := 0
		for _, rec := range recs {
			if rec.Err != nil || rec.Stream != eo.e.Stream {
				continue
			}
			key, err := en.x.ev.EnrichKey(i, rec.Fields)
			if err != nil {
				rec.Err = err
				continue
			}
			if err := eo.op.Submit(ctx, key, rec); err != nil {
				return err
			}
			n++
		}
		if n == 0 {
			continue
		}
		if err := eo.op.Drain(ctx); err != nil {
			return err
		}
		// Drain returns once the reader has received every result; wait until
		// it has also stored them.
		eo.mu.Lock()
		for len(eo.outs) < n {
			eo.got.Wait()
		}
		for _, out := range eo.outs {
			rec := out.Element.(*Record)
			rec.Fields[eo.e.Name] = out.Value
		}
		eo.outs = eo.outs[:0]
		eo.mu.Unlock()
		touched = true
	}
	if touched {
		for _, rec := range recs {
			if rec.Err == nil && len(en.x.rs.Streams[rec.Stream].Enrichments) > 0 {
				en.x.project(rec)
			}
		}
	}
	return nil
}

// Close stops every operator and reader.
func (en *Enricher) Close() {
	for _, eo := range en.ops {
		eo.op.Close()
		eo.wg.Wait()
	}
}

// EnrichmentStats calls fn with each enrichment's counters.
func (en *Enricher) EnrichmentStats(fn func(name string, st asyncio.Stats)) {
	for _, eo := range en.ops {
		fn(eo.e.Name, eo.op.Stats())
	}
}
