package engine

import (
	"fmt"
	"testing"

	"github.com/vigil-cep/vigil/rules"
)

// TestPatternCap: a key flooded with start events of a one_or_more pattern
// with any-contiguity keeps at most max_partials partial matches; the
// overflow is counted in the task's stats, never a crash or unbounded state.
func TestPatternCap(t *testing.T) {
	rs, err := rules.Load([]byte(`
streams:
  logins: {key: user_id, time: ts, watermark: {max_out_of_order: 0s}}
patterns:
  probe:
    stream: logins
    ordering: arrival
    max_partials: 100
    steps:
      - {name: failed, where: status == "FAILED", one_or_more: true, allow_combinations: true}
      - {name: ok, where: status == "SUCCESS", contiguity: any}
`))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 1000 {
		lines = append(lines, fmt.Sprintf(`{"stream":"logins","value":{"user_id":"u1","status":"FAILED","ts":%d}}`, i))
	}
	r := newRunner(t, rs)
	r.feed(lines, 0)
	r.task.Finish()
	st := r.task.Stats()
	if st.PartialsDropped == 0 || st.Matches != 0 {
		t.Fatalf("stats %+v: want partial matches dropped at the cap and no match", st)
	}
	t.Logf("1000 start events, cap 100: %d partial matches dropped", st.PartialsDropped)
}
