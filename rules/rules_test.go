package rules

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// errorLines renders an ErrorList the way vigil validate prints it.
func errorLines(t *testing.T, err error) []string {
	t.Helper()
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want an ErrorList, got %T: %v", err, err)
	}
	var lines []string
	for _, e := range list {
		lines = append(lines, e.Error())
	}
	return lines
}

func TestValidateReportsEveryMistake(t *testing.T) {
	src, err := os.ReadFile("testdata/three_mistakes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(src)
	want := []string{
		`8:65: rules.many_ips.when: unexpected token EOF`,
		`10:13: rules.big.stream: unknown stream "transactoins" (streams: transactions)`,
		`16:13: rules.slow.action: action must be allow, review or block, not "stop"`,
	}
	if diff := cmp.Diff(want, errorLines(t, err)); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

func TestLoadErrors(t *testing.T) {
	const stream = "streams:\n  tx: {key: user_id, time: ts, id: tx_id, decide: true}\n"
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown field", stream + "rules:\n  r: {stream: tx, action: block, whne: 'true'}\n",
			[]string{`4:34: rules.r.whne: unknown field "whne" (known: stream, action, score, mode, when, reason, description)`}},
		{"missing when", stream + "rules:\n  r: {stream: tx, action: block}\n",
			[]string{`4:6: rules.r.when: when is required: the condition under which the rule matches`}},
		{"when must be bool", stream + "rules:\n  r: {stream: tx, action: block, when: '\"a\" + \"b\"'}\n",
			[]string{`4:41: rules.r.when: expected bool, but got string`}},
		{"pattern quantifier on a negative step", stream + "patterns:\n  p: {stream: tx, steps: [{name: a, where: 'true'}, {name: b, where: 'true', not: strict, times: 2}]}\n",
			[]string{`4:6: patterns.p: step "b": a negative step cannot have a quantifier`}},
		{"pattern skip to an unknown step", stream + "patterns:\n  p: {stream: tx, after_match: {skip_to_first: x}, steps: [{name: a, where: 'true'}]}\n",
			[]string{`4:6: patterns.p: skip_to_first: unknown step "x"`}},
		{"pattern trailing not without within", stream + "patterns:\n  p: {stream: tx, steps: [{name: a, where: 'true'}, {name: b, where: 'true', not: relaxed}]}\n",
			[]string{`4:6: patterns.p: a pattern cannot end with not: relaxed without within`}},
		{"pattern optional step before a negative one", stream + "patterns:\n  p: {stream: tx, within: 1m, steps: [{name: a, where: 'true', optional: true}, {name: b, where: 'true', not: relaxed}, {name: c, where: 'true'}]}\n",
			[]string{`4:6: patterns.p: step "a": an optional step cannot precede a negative step`}},
		{"pattern named like a stream", stream + "patterns:\n  tx: {stream: tx, steps: [{name: a, where: 'true'}]}\n",
			[]string{`4:7: patterns.tx: pattern "tx" has the name of a stream: a pattern's matches form a stream of its name`}},
		{"patterns in a circle", stream + "patterns:\n  p: {stream: q, steps: [{name: a, where: 'true'}]}\n  q: {stream: p, steps: [{name: a, where: 'true'}]}\n",
			[]string{`4:6: patterns.p: patterns and joins read each other's output in a circle`, `5:6: patterns.q: patterns and joins read each other's output in a circle`}},
		{"join bounds", stream + "  pay: {key: user_id, time: ts}\njoins:\n  j: {left: tx, right: pay, between: [5m, 1m]}\n",
			[]string{`5:38: joins.j.between: join bounds: lower 5m0s is above upper 1m0s`}},
		{"join needs between", stream + "  pay: {key: user_id, time: ts}\njoins:\n  j: {left: tx, right: nope}\n",
			[]string{`5:6: joins.j.between: between is required: [lower, upper] of right.time - left.time, e.g. ["0s", "5m"]`, `5:24: joins.j.right: unknown stream "nope" (streams: j, pay, tx)`}},
		{"join condition", stream + "  pay: {key: user_id, time: ts}\njoins:\n  j: {left: tx, right: pay, between: [0s, 1m], where: 'left.id =='}\n",
			[]string{`5:65: joins.j.where: unexpected token EOF`}},
		{"enrichment needs one lookup", stream + "enrichments:\n  e: {stream: tx, timeout: 50ms}\n",
			[]string{`4:6: enrichments.e: an enrichment needs exactly one of redis and http`}},
		{"enrichment url and timeout", stream + "enrichments:\n  e: {stream: tx, http: {url: 'ftp://x', key: user_id}}\n",
			[]string{`4:6: enrichments.e.timeout: timeout is required and positive: it covers every attempt of one lookup`, `4:31: enrichments.e.http.url: url must be an http(s) URL with {key} in it, not "ftp://x"`}},
		{"enrichment fallback", stream + "enrichments:\n  e: {stream: tx, redis: {get: user_id}, timeout: 5ms, fallback: [1]}\n",
			[]string{`4:66: enrichments.e.fallback: fallback must be a mapping, e.g. {risk: UNKNOWN}`}},
		{"pattern step condition", stream + "patterns:\n  p: {stream: tx, steps: [{name: a, where: 'amount >'}]}\n",
			[]string{`4:52: patterns.p.steps[0].where: unexpected token EOF`}},
		{"history in a predicate", stream + "rules:\n  r: {stream: tx, action: block, when: 'any(history(\"tx\", \"5m\"), len(history(\"tx\", \"1m\")) > 1)'}\n",
			[]string{`4:70: rules.r.when: history() cannot be called inside a predicate (the cost would grow with the square of the history)`}},
		{"history variable in a predicate", stream + "rules:\n  r: {stream: tx, action: block, when: 'let h = history(\"tx\", \"5m\"); any(h, len(h) > 1)'}\n",
			[]string{`4:81: rules.r.when: h holds history(): it cannot be used inside a predicate (the cost would grow with the square of the history)`}},
		{"history args", stream + "rules:\n  r: {stream: tx, action: block, when: 'len(history(\"tx\", 5)) > 1'}\n",
			[]string{`4:45: rules.r.when: history() takes two string literals, e.g. history("transactions", "5m")`}},
		{"history unknown stream", stream + "rules:\n  r: {stream: tx, action: block, when: 'len(history(\"tz\", \"5m\")) > 1'}\n",
			[]string{`4:45: rules.r.when: history(): unknown stream "tz"`}},
		{"history outside rules", "streams:\n  tx: {key: 'history(\"tx\", \"1m\")'}\n",
			[]string{`2:14: streams.tx.key: history() is available in rule conditions and reasons only`}},
		{"now is not available", stream + "rules:\n  r: {stream: tx, action: block, when: 'now() > date(\"2024-01-01\")'}\n",
			[]string{`4:41: rules.r.when: now() is not available: rules run in event time, so a replay decides the same way (use the event's time field)`}},
		{"unknown function", stream + "rules:\n  r: {stream: tx, action: block, when: 'foo(1)'}\n",
			[]string{`4:41: rules.r.when: unknown function foo()`}},
		{"rule on a stream that is not decided", "streams:\n  l: {key: u}\nrules:\n  r: {stream: l, action: block, when: 'true'}\n",
			[]string{`4:15: rules.r.stream: stream "l" is not decided (set decide: true on it): rules decide events`}},
		{"deciding stream without id", "streams:\n  tx: {key: u, decide: true}\n",
			[]string{`2:7: streams.tx.id: a deciding stream needs an id (the transaction id that keys its decisions)`}},
		{"bad duration", "streams:\n  tx: {key: u, watermark: {max_out_of_order: 5 minutes}}\n",
			[]string{`2:46: streams.tx.watermark.max_out_of_order: invalid duration "5 minutes" (want a Go duration such as "5m" or "250ms")`}},
		{"retention shorter than a rule reads", stream[:len(stream)-2] + ", retention: 1m}\nrules:\n  r: {stream: tx, action: block, when: 'len(history(\"tx\", \"5m\")) > 1'}\n",
			[]string{`2:68: streams.tx.retention: retention 1m0s is shorter than the 5m0s of history read by rules.r.when`}},
		{"window with two kinds", stream + "windows:\n  w: {stream: tx, tumbling: 1m, session: {gap: 1m}, aggregate: {n: count()}}\n",
			[]string{`4:6: windows.w: a window needs exactly one of tumbling, sliding or session`}},
		{"unknown aggregate", stream + "windows:\n  w: {stream: tx, tumbling: 1m, aggregate: {n: median(amount)}}\n",
			[]string{`4:48: windows.w.aggregate.n: unknown aggregate median() (count, sum, min, max, avg, count_distinct)`}},
		{"aggregate argument error", stream + "windows:\n  w: {stream: tx, tumbling: 1m, aggregate: {n: 'sum(amount +)'}}\n",
			[]string{`4:60: windows.w.aggregate.n: unexpected token EOF`}},
		{"declared fields catch typos", "streams:\n  tx: {key: user_id, fields: {user_id: string, amount: number}, id: tx_id, decide: true}\nrules:\n  r: {stream: tx, action: block, when: 'amout > 5'}\n",
			[]string{`2:69: streams.tx.id: unknown name tx_id`, `4:41: rules.r.when: unknown name amout`}},
		{"yaml syntax", "streams: {tx: {key: u}\n", []string{`1:1: (document): did not find expected ',' or '}'`}},
		// go-yaml's parser errors count lines from 0, its scanner's from 1.
		{"unclosed mapping", "streams:\n  tx: {topic: t\nrules: {}\n", []string{`2:1: (document): did not find expected ',' or '}'`}},
		{"unclosed sequence", "streams:\n  tx: {topic: t, key: u}\nrules:\n  r: [a, b\n", []string{`4:1: (document): did not find expected ',' or ']'`}},
		{"mapping in a value", "streams:\n  tx: {topic: t}\nrules:\n  a: b: c\n", []string{`4:1: (document): mapping values are not allowed in this context`}},
		{"tab indentation", "streams:\n  tx:\n\t topic: t\n", []string{`3:1: (document): found character that cannot start any token`}},
		{"empty", "", []string{`1:1: (document): document is empty`}},
		{"duplicate item", "streams:\n  tx: {key: u}\n  tx: {key: v}\n", []string{`3:3: streams.tx: "tx" is defined twice`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Load accepted the document")
			}
			if diff := cmp.Diff(tt.want, errorLines(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHostileExpressions: sources that would make expr's recursive parser or
// the VM expensive are refused quickly, and the process survives.
func TestHostileExpressions(t *testing.T) {
	const stream = "streams:\n  tx: {key: user_id, time: ts, id: tx_id, decide: true}\nrules:\n  r: {stream: tx, action: block, when: "
	tests := []struct {
		name, when, want string
	}{
		{"deep nesting", `'` + strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100) + ` > 0'`, "expression nests brackets more than 64 deep"},
		{"too long", `'` + strings.Repeat("1 + ", 1200) + `1 > 0'`, "expression is 4805 bytes, more than the limit of 4096"},
		{"too many nodes", `'` + strings.Repeat("a+", 1000) + `a > 0'`, "compilation failed: expression exceeds maximum allowed nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]byte(stream + tt.when + "}\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestMegabyteOfParentheses is Must show 5: a document of 1 MB of nested
// parentheses is refused quickly. The rule's case reaches the passes that
// read an expression again for its fields (deriveRetention), which parsed
// it unguarded and overflowed the stack.
func TestMegabyteOfParentheses(t *testing.T) {
	for _, doc := range []string{
		"streams:\n  tx: {key: '" + strings.Repeat("(", 1<<20) + "'}\n",
		"streams:\n  tx: {topic: tx, key: user_id, time: ts, decide: true}\nrules:\n  r:\n    stream: tx\n    action: block\n    when: '" +
			strings.Repeat("(", 1<<20) + "'\n",
		strings.Repeat("[", 1<<20),
		strings.Repeat("{a: ", 1<<18),
	} {
		start := time.Now()
		_, err := Load([]byte(doc))
		if err == nil {
			t.Fatalf("a %d-byte nested document was accepted", len(doc))
		}
		t.Logf("refused in %v: %.120s", time.Since(start), err)
	}
}

func TestExampleRulesetLoads(t *testing.T) {
	src, err := os.ReadFile("../examples/fraud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, st := range rs.Streams {
		got[st.Name] = fmt.Sprintf("retention %v, fields %v", time.Duration(st.Retention)*time.Millisecond, st.HistoryFields)
	}
	want := map[string]string{
		"ato":          "retention 30m0s, fields []",
		"transactions": "retention 5m0s, fields [amount ip]",
		"logins":       "retention 30m0s, fields [event status]",
		"devices":      "retention 30m0s, fields [event status]",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("derived retention and history fields (-want +got):\n%s", diff)
	}
}

func FuzzLoad(f *testing.F) {
	for _, p := range []string{"testdata/three_mistakes.yaml", "../examples/fraud.yaml"} {
		if src, err := os.ReadFile(p); err == nil {
			f.Add(src)
		}
	}
	f.Add([]byte(`{"streams":{"tx":{"key":"user_id","time":"ts"}},"windows":{"w":{"stream":"tx","session":{"gap":"1m"},"aggregate":{"n":"count()"}}}}`))
	f.Add([]byte("a: &a [*a, *a]\nb: *a\n"))
	f.Add([]byte("streams:\n  l: {key: u, time: ts}\n  p: {key: u}\npatterns:\n  x: {stream: l, within: 1m, after_match: {skip_to_last: a}, steps: [{name: a, where: 'true', times: [1, 3], greedy: true}, {name: b, where: 'match.a[0].u == u', not: relaxed}]}\njoins:\n  j: {left: l, right: p, between: [-1m, 1m], where: 'left.u == right.u'}\n"))
	// Every section and field type: enrichments (max_body is an int64), limits, field bounds.
	f.Add([]byte("streams:\n  tx: {key: u, time: ts, id: i, decide: true, max_field_bytes: 64, fields: {u: string, ts: number, i: string, a: number}}\n" +
		"enrichments:\n  p: {stream: tx, http: {url: 'http://h/{key}', key: u, max_body: 4096}, timeout: 1s, retries: 2, cache: {size: 10, ttl: 1m}, fallback: {r: 1}}\n" +
		"  q: {stream: tx, redis: {hash: '\"p:\" + u'}, capacity: 4, ordered: true}\n" +
		"rules:\n  r: {stream: tx, action: block, score: 1.5, when: 'a > 1 && p.r == 1'}\nlimits: {cost: 5000}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		rs, err := Load(src)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("Load returned %T %v, want a non-empty ErrorList", err, err)
			}
			return
		}
		if _, err := rs.NewEvaluator((*Recorded)(nil)); err != nil {
			t.Fatalf("a loaded ruleset does not bind: %v", err)
		}
	})
}

// A YAML syntax error carries its source line (go-yaml gives no column).
func TestYAMLErrorSnippet(t *testing.T) {
	_, err := Load([]byte("streams:\n  tx: {topic: t\nrules: {}\n"))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 || list[0].Snippet != "  tx: {topic: t" {
		t.Fatalf("error %v, want one with the line of the unclosed mapping", err)
	}
}
