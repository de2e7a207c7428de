package engine

import (
	"fmt"
	"testing"

	"github.com/vigil-cep/vigil/rules"
)

// TestKeyedStateIsBounded: a long stream of ever-new keys keeps only the keys
// whose history is still within retention; the sweep forgets the rest, so
// memory follows the live keys, not every key ever seen.
func TestKeyedStateIsBounded(t *testing.T) {
	rs, err := rules.Load([]byte(`
streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true, watermark: {max_out_of_order: 0s}}
rules:
  velocity: {stream: tx, action: review, score: 1, when: 'len(history("tx", "1m")) > 3'}
`))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20_000
	lines := make([]string, n)
	for i := range n {
		lines[i] = fmt.Sprintf(`{"stream":"tx","value":{"tx_id":"t%d","user_id":"u%d","ts":%d}}`, i, i, i*1000)
	}
	r := newRunner(t, rs)
	r.feed(lines, 0)
	r.task.Finish()
	st := r.task.Stats()
	// Retention is 1m and keys are swept every minute of event time: at most
	// about two minutes of keys (one per second) can be alive.
	if st.Keys > 200 || st.Decisions != n {
		t.Fatalf("after %d one-off keys: %d keys kept, %d decisions; want at most 200 keys", n, st.Keys, st.Decisions)
	}
	t.Logf("%d one-off keys over %d s: %d kept", n, n, st.Keys)
}
