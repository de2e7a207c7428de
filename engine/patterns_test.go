package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/vigil-cep/vigil/rules"
)

// TestPatternCapInReplay: a key flooded with start events of a one_or_more
// pattern with any-contiguity keeps at most max_partials partial matches; the
// overflow is counted in the replay stats, never a crash or unbounded state.
func TestPatternCapInReplay(t *testing.T) {
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
	var in bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&in, `{"stream":"logins","value":{"user_id":"u1","status":"FAILED","ts":%d}}`+"\n", i)
	}
	var out bytes.Buffer
	st, err := Replay(context.Background(), rs, &in, &out, ReplayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if st.PartialsDropped == 0 || st.Matches != 0 {
		t.Fatalf("stats %+v: want partial matches dropped at the cap and no match", st)
	}
	t.Logf("1000 start events, cap 100: %d partial matches dropped", st.PartialsDropped)
}
