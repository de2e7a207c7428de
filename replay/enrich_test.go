package replay

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/asyncio"
	"github.com/vigil-cep/vigil/rules"
)

// TestReplayEnrichment: a lookup's result is merged into the event under the
// enrichment's name before rules read it; a failed lookup gives the fallback,
// marked with _error, and is counted.
func TestReplayEnrichment(t *testing.T) {
	rs, err := rules.Load([]byte(`
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true}
enrichments:
  profile: {stream: tx, redis: {hash: '"profile:" + user_id'}, timeout: 500ms, capacity: 4, fallback: {risk: UNKNOWN}}
rules:
  risky: {stream: tx, action: block, score: 50, when: 'profile.risk == "HIGH"', reason: '"high-risk profile"'}
  unknown: {stream: tx, action: review, score: 5, when: 'profile.risk == "UNKNOWN" && profile._error != nil', reason: 'profile._error'}
`))
	if err != nil {
		t.Fatal(err)
	}
	lookups := func(e *rules.Enrichment) (asyncio.Lookup, error) {
		return asyncio.LookupFunc(func(_ context.Context, key string) (map[string]any, error) {
			switch key {
			case "profile:u1":
				return map[string]any{"risk": "HIGH"}, nil
			case "profile:u2":
				return map[string]any{"risk": "LOW"}, nil
			}
			return nil, asyncio.Permanent(errors.New("no such profile"))
		}), nil
	}
	in := strings.Join([]string{
		`{"stream":"tx","value":{"tx_id":"a","user_id":"u1","ts":1}}`,
		`{"stream":"tx","value":{"tx_id":"b","user_id":"u2","ts":2}}`,
		`{"stream":"tx","value":{"tx_id":"c","user_id":"u3","ts":3}}`,
	}, "\n")
	var out bytes.Buffer
	st, err := Run(context.Background(), rs, strings.NewReader(in), &out, Config{Lookups: lookups})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`"id":"a","stream":"tx","key":"u1","time":1,"action":"block"`,
		`"id":"b","stream":"tx","key":"u2","time":2,"action":"allow"`,
		`"id":"c","stream":"tx","key":"u3","time":3,"action":"review","score":5,"rules":[{"rule":"unknown","action":"review","score":5,"reason":"no such profile"}]`,
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %s:\n%s", w, out.String())
		}
	}
	if st.Lookups != 3 || st.LookupFallbacks != 1 {
		t.Errorf("lookups %d, fallbacks %d; want 3 and 1", st.Lookups, st.LookupFallbacks)
	}
	if _, err := Run(context.Background(), rs, strings.NewReader(in), &out, Config{}); err == nil || !strings.Contains(err.Error(), "no lookup configured") {
		t.Errorf("replay without lookups: %v, want a clear error", err)
	}
}
