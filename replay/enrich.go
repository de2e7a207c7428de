package replay

import (
	"context"

	"github.com/vigil-cep/vigil/asyncio"
	"github.com/vigil-cep/vigil/engine"
)

// enricher runs the ruleset's enrichments over each batch before its tasks
// run it (engine.Enricher), on Run's goroutine.
type enricher struct {
	en   *engine.Enricher
	recs []*engine.Record // scratch for run
}

// run enriches the batch's records; its control records have nothing to
// enrich.
func (e *enricher) run(ctx context.Context, b *batch) error {
	recs := e.recs[:0]
	for j := range b.items {
		if rec := &b.items[j]; !rec.Control {
			recs = append(recs, rec)
		}
	}
	e.recs = recs
	err := e.en.Enrich(ctx, recs)
	clear(e.recs) // no pointers into a released batch
	return err
}

// stats adds the enrichments' counters to s.
func (e *enricher) stats(s *engine.Stats) {
	e.en.EnrichmentStats(func(_ string, st asyncio.Stats) {
		s.Lookups += st.Completed
		s.LookupFallbacks += st.Fallbacks
	})
}
