package replay

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/rules"
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
		st, err := Run(context.Background(), rs, strings.NewReader(line+"\n"+line+"\n"), &out, Config{MaxRecordBytes: 4096})
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

// FuzzReplayOperators runs arbitrary pairs of lines through the pattern and
// join goldens' rulesets: no input makes the NFA, the join or the derived
// streams panic, and every line is accounted for.
func FuzzReplayOperators(f *testing.F) {
	for _, s := range []string{
		`{"stream":"logins","value":{"user_id":"u1","status":"FAILED","ip":"1.1.1.1","ts":2000}}`,
		`{"stream":"logins","value":{"user_id":"u1","status":"SUCCESS","ip":"6.6.6.6","ts":5000}}`,
		`{"stream":"transactions","value":{"tx_id":"t2","user_id":"u1","amount":900,"ts":6000}}`,
		`{"stream":"orders","value":{"user_id":"u1","order_id":"o1","ts":1000}}`,
		`{"stream":"payments","value":{"user_id":"u1","pay_id":"p1","order_id":"o1","amount":10,"ts":30000}}`,
		`{"watermark":1e15}`,
	} {
		f.Add(s, s)
	}
	sets := []string{"testdata/replay/ato/rules.yaml", "testdata/replay/join/rules.yaml", "testdata/replay/derived/rules.yaml"}
	var rss []*rules.Ruleset
	for _, p := range sets {
		rss = append(rss, loadRuleset(f, p))
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if strings.ContainsAny(a+b, "\n") {
			return
		}
		for _, rs := range rss {
			var out bytes.Buffer
			input := a + "\n" + b + "\n" + a + "\n"
			if _, err := Run(context.Background(), rs, strings.NewReader(input), &out, Config{}); err != nil {
				t.Fatalf("replay failed: %v", err)
			}
		}
	})
}
