package rules

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// costDoc is a ruleset with one rule, its when on line 6.
const costDoc = `streams:
  transactions: {key: user_id, time: ts, id: tx_id, decide: true}
  logins: {key: user_id, time: ts}
rules:
  r:
    {stream: transactions, action: block, when: '%s'}
`

// hostileRule is one line of testdata/hostile.tsv.
type hostileRule struct {
	when string
	at   string // where the error points: the first occurrence of this text (a trailing $: the last)
	msg  string // a part of the message
}

func readHostile(t *testing.T) []hostileRule {
	t.Helper()
	data, err := os.ReadFile("testdata/hostile.tsv")
	if err != nil {
		t.Fatal(err)
	}
	var out []hostileRule
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("hostile.tsv: %q has %d fields, want 3", line, len(f))
		}
		out = append(out, hostileRule{f[0], f[1], f[2]})
	}
	return out
}

// TestHostileRulesRefused is the corpus of rules that cost too much, or
// whose cost cannot be bounded, each refused at the part that is to blame.
func TestHostileRulesRefused(t *testing.T) {
	tests := readHostile(t)
	if len(tests) < 15 {
		t.Fatal("the corpus needs at least 15 hostile rules")
	}
	const line, offset = 6, len(`    {stream: transactions, action: block, when: '`)
	for _, tt := range tests {
		_, err := Load([]byte(fmt.Sprintf(costDoc, tt.when)))
		var list ErrorList
		if !errors.As(err, &list) || len(list) != 1 {
			t.Errorf("%s: want one error, got %v", tt.when, err)
			continue
		}
		e := list[0]
		i := strings.Index(tt.when, tt.at)
		if at, ok := strings.CutSuffix(tt.at, "$"); ok { // the last occurrence
			i = strings.LastIndex(tt.when, at)
		}
		col := offset + i + 1
		if e.Path != "rules.r.when" || e.Line != line || e.Column != col || !strings.Contains(e.Err.Error(), tt.msg) {
			t.Errorf("%s:\n got %s at %d:%d: %v\nwant %s at %d:%d: …%s…", tt.when, e.Path, e.Line, e.Column, e.Err, "rules.r.when", line, col, tt.msg)
		}
	}
}

// TestCheapRulesAccepted holds the estimate to what everyday rules cost.
func TestCheapRulesAccepted(t *testing.T) {
	for _, when := range []string{
		`amount > 100 && merchant != "x"`,
		`merchant matches "^ACME [0-9]+$"`,
		`len(uniq(map(history("transactions", "5m"), .ip))) >= 3`,
		`count(history("transactions", "1m"), .amount <= 2) >= 5`,
		`any(history("transactions", "1h"), .amount > amount)`,
		`sum(map(history("transactions", "1h"), .amount)) > 1000`,
		`all(1..1000, # > 0)`,
		`upper(merchant) startsWith "ACME"`,
		`string(len(history("transactions", "1h"))) + " payments" != ""`,
	} {
		if _, err := Load([]byte(fmt.Sprintf(costDoc, when))); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
}

// TestCostLimits covers limits.cost: lowering the budget refuses what the
// default accepts, raising it is bounded by MaxCostBudget, and the record
// limit bounds whole events.
func TestCostLimits(t *testing.T) {
	const when = `sum(map(history("transactions", "1h"), .amount)) > 1000`
	doc := fmt.Sprintf(costDoc, when)
	if _, err := Load([]byte(doc + "limits: {cost: 1000}\n")); err == nil || !strings.Contains(err.Error(), "over the budget of 1000") {
		t.Errorf("limits.cost 1000: got %v", err)
	}
	if _, err := Load([]byte(doc + "limits: {cost: 2000000}\n")); err == nil || !strings.Contains(err.Error(), "limits.cost: 2000000 is over the ceiling of 1000000") {
		t.Errorf("limits.cost over the ceiling: got %v", err)
	}
	big := fmt.Sprintf(costDoc, `len(toJSON($env)) > 0`)
	if _, err := Load([]byte(big)); err == nil {
		t.Error("toJSON($env) with 1 MiB records: accepted")
	}
	if _, err := Load([]byte(big), MaxRecordBytes(4096)); err != nil {
		t.Errorf("toJSON($env) with 4 KiB records: %v", err)
	}
	narrow := strings.Replace(fmt.Sprintf(costDoc, `merchant matches "(a|b|c)*z{1,1000}"`), "decide: true}", "decide: true, max_field_bytes: 16}", 1)
	if _, err := Load([]byte(narrow)); err != nil {
		t.Errorf("a regular expression over 16-byte fields: %v", err)
	}
}

func TestUndeclaredFieldsWarned(t *testing.T) {
	rs, err := Load([]byte(fmt.Sprintf(costDoc, `let m = merchnat; amount > 1 && m != "" && any(history("transactions", "1h"), .ip == ip)`)))
	if err != nil {
		t.Fatal(err)
	}
	want := `2:17: streams.transactions: no fields declared: nothing checks that its events have amount, ip, merchnat, which its rules read (a misspelt name reads null at every decision); declare them under fields:`
	if len(rs.Warnings) != 1 || rs.Warnings[0].Error() != want {
		t.Errorf("warnings: got %v\nwant %s", rs.Warnings, want)
	}
	declared := strings.Replace(fmt.Sprintf(costDoc, `amount > 1`), "decide: true}", "decide: true, fields: {amount: number, user_id: string, ts: number, tx_id: string}}", 1)
	if rs, err := Load([]byte(declared)); err != nil {
		t.Errorf("declared fields: %v", err)
	} else if len(rs.Warnings) != 0 {
		t.Errorf("declared fields: got warnings %v", rs.Warnings)
	}
	misspelt := strings.Replace(fmt.Sprintf(costDoc, `amonut > 1`), "decide: true}", "decide: true, fields: {amount: number, user_id: string, ts: number, tx_id: string}}", 1)
	if _, err := Load([]byte(misspelt)); err == nil || !strings.Contains(err.Error(), "unknown name amonut") {
		t.Errorf("a misspelt declared field: got %v", err)
	}
}

// TestEveryFieldDecodes loads a document that sets a field of every Go type
// the document has (max_body is an int64): the decoder once panicked on it,
// in the REST API and in every instance reading the rules topic.
func TestEveryFieldDecodes(t *testing.T) {
	doc := `streams:
  tx: {key: user_id, time: ts, id: tx_id, decide: true, max_field_bytes: 64, max_history: 10}
enrichments:
  profile: {stream: tx, http: {url: "http://127.0.0.1:1/{key}", key: user_id, max_body: 16000000}, timeout: 1s}
rules:
  r: {stream: tx, action: block, score: 1.5, when: 'profile.risk == "high"'}
limits: {cost: 5000}
`
	rs, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Enrichments[0].MaxBody; got != 16_000_000 {
		t.Errorf("max_body: %d", got)
	}
	if _, err := Load([]byte(strings.Replace(doc, "16000000", "1e99", 1))); err == nil || !strings.Contains(err.Error(), "want an integer") {
		t.Errorf("max_body 1e99: %v", err)
	}
}
