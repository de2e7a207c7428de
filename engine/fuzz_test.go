package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// FuzzReplayLine feeds arbitrary lines through the record decoder and a task:
// nothing panics, and every non-blank line is processed or sent to the DLQ
// with a reason, never dropped.
func FuzzReplayLine(f *testing.F) {
	for _, s := range []string{
		`{"stream":"tx","value":{"tx_id":"a","user_id":"u1","amount":5,"ts":1000}}`,
		`{"stream":"tx","value":{"tx_id":"a","user_id":"u1","amount":5,"ts":"2026-01-01T00:00:00Z"},"partition":3,"timestamp":5}`,
		`{"watermark":6}`,
		`{"watermark":6,"stream":"tx","partition":0}`,
		`{"stream":"tx","value":{"tx_id":1e400}}`,
		`{"stream":"tx","value":[[[[[[[[[]]]]]]]]]}`,
		`{"stream":"tx","value":{"user_id":{"a":1},"ts":-1e18}}`,
		"\x00\xff{",
	} {
		f.Add(s)
	}
	rs := loadRuleset(f, "testdata/replay/idempotent/rules.yaml")
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\n") {
			return
		}
		var out bytes.Buffer
		st, err := Replay(context.Background(), rs, strings.NewReader(line+"\n"+line+"\n"), &out, ReplayConfig{MaxRecordBytes: 4096})
		if err != nil {
			t.Fatalf("replay failed: %v", err)
		}
		if isBlank(line) {
			return
		}
		control := strings.Contains(line, `"watermark"`) && st.Records == 0
		if !control && st.Records != 2 {
			t.Fatalf("2 lines, %d records accounted for", st.Records)
		}
		if st.DLQ > 0 && !bytes.Contains(out.Bytes(), []byte(`"kind":"dlq"`)) {
			t.Fatalf("DLQ counted but not written")
		}
	})
}
