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

// enricher runs a ruleset's enrichments for replay (DESIGN §4 "Async
// enrichment"). Each batch's records are looked up concurrently, up to each
// enrichment's capacity, and their results merged under the enrichment's
// name before the batch reaches the tasks: output order, and so watermarks,
// stay those of the input whether an enrichment is ordered or not.
//
// The replay goroutine drives it (Submit, Drain); one reader goroutine per
// enrichment collects results; close stops them all.
type enricher struct {
	x   *Extractor // key expressions and re-projection, on the replay goroutine
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

func newEnricher(rs *rules.Ruleset, lookups LookupFactory) (*enricher, error) {
	x, err := NewExtractor(rs)
	if err != nil {
		return nil, err
	}
	en := &enricher{x: x}
	for _, e := range rs.Enrichments {
		if lookups == nil {
			en.close()
			return nil, fmt.Errorf("enrichment %s: no lookup configured (vigil replay --redis ADDR for Redis)", e.Name)
		}
		l, err := lookups(e)
		if err != nil {
			en.close()
			return nil, fmt.Errorf("enrichment %s: %w", e.Name, err)
		}
		op, err := asyncio.New(l, e.Config)
		if err != nil {
			en.close()
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

// run enriches the batch's records, enrichment after enrichment (a later one
// may read an earlier one's result in its key).
func (en *enricher) run(ctx context.Context, b *batch) error {
	touched := false
	for i, eo := range en.ops {
		n := 0
		for j := range b.items {
			it := &b.items[j]
			if it.control || it.rec.Err != nil || it.rec.Stream != eo.e.Stream {
				continue
			}
			key, err := en.x.ev.EnrichKey(i, it.rec.Fields)
			if err != nil {
				it.rec.Err = err
				continue
			}
			if err := eo.op.Submit(ctx, key, it); err != nil {
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
			it := out.Element.(*item)
			it.rec.Fields[eo.e.Name] = out.Value
		}
		eo.outs = eo.outs[:0]
		eo.mu.Unlock()
		touched = true
	}
	if touched {
		for j := range b.items {
			if it := &b.items[j]; !it.control && it.rec.Err == nil && len(en.x.rs.Streams[it.rec.Stream].Enrichments) > 0 {
				en.x.project(&it.rec)
			}
		}
	}
	return nil
}

// stats adds the enrichments' counters to s.
func (en *enricher) stats(s *Stats) {
	for _, eo := range en.ops {
		st := eo.op.Stats()
		s.Lookups += st.Completed
		s.LookupFallbacks += st.Fallbacks
	}
}

// close stops every operator and reader.
func (en *enricher) close() {
	for _, eo := range en.ops {
		eo.op.Close()
		eo.wg.Wait()
	}
}
