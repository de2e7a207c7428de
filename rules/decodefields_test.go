package rules

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecodeFields: a stream decodes only the fields something reads, and
// every field whenever its events may be seen whole.
func TestDecodeFields(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string // of stream tx; nil: every field
	}{
		{"key, time and id only", "streams:\n  tx: {key: u, time: ts, id: id, decide: true}\n",
			[]string{"id", "ts", "u"}},
		{"rule fields", "streams:\n  tx: {key: u, time: ts, id: id, decide: true}\nrules:\n  r: {stream: tx, action: block, when: 'amount > 10 && country != \"FR\"', reason: 'merchant'}\n",
			[]string{"amount", "country", "id", "merchant", "ts", "u"}},
		{"disabled rules still count", "streams:\n  tx: {key: u, time: ts, id: id, decide: true}\nrules:\n  r: {stream: tx, action: block, mode: disabled, when: 'card == \"x\"'}\n",
			[]string{"card", "id", "ts", "u"}},
		{"history fields, element predicates, inline distinct field",
			"streams:\n  tx: {key: u, time: ts, id: id, decide: true}\nrules:\n" +
				"  a: {stream: tx, action: block, when: 'count(history(\"tx\", \"1m\"), .amount <= 2) >= 5'}\n" +
				"  b: {stream: tx, action: block, when: 'len(uniq(map(history(\"tx\", \"5m\"), .ip))) >= 3'}\n",
			[]string{"amount", "history", "id", "ip", "ts", "u"}},
		{"window where and arguments", "streams:\n  tx: {key: u, time: ts}\nwindows:\n  w: {stream: tx, tumbling: 1h, where: 'ok', aggregate: {s: sum(amount)}}\n",
			[]string{"amount", "ok", "ts", "u"}},
		{"$env reads anything", "streams:\n  tx: {key: u, time: ts, id: id, decide: true}\nrules:\n  r: {stream: tx, action: block, when: '$env[\"am\" + \"ount\"] > 1'}\n",
			nil},
		{"history kept whole", "streams:\n  tx: {key: u, time: ts, id: id, decide: true}\nrules:\n  r: {stream: tx, action: block, when: 'len(history(\"tx\", \"1m\")[0]) > 1'}\n",
			nil},
		{"decide: watermark keeps events waiting", "streams:\n  tx: {key: u, time: ts, id: id, decide: watermark}\n",
			nil},
		{"patterns see events whole", "streams:\n  tx: {key: u, time: ts}\npatterns:\n  p: {stream: tx, within: 1m, steps: [{name: a, where: 'x == 1'}]}\n",
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Load([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			got := rs.Streams[0].DecodeFields
			if diff := cmp.Diff(tc.want, got); diff != "" || (tc.want == nil) != (got == nil) {
				t.Errorf("DecodeFields = %q, want %q", got, tc.want)
			}
		})
	}
}
