package workload

import (
	"os"
	"strings"
	"testing"
)

// userHistory is one user's events of each stream, in arrival order, as the
// rules engine keeps them (duplicates not counted again).
type userHistory struct{ tx, logins, devices []value }

// window calls f for each event of evs with time in [t-d, t].
func window(evs []value, t, d int64, f func(value)) {
	for _, v := range evs {
		if v.TS >= t-d && v.TS <= t {
			f(v)
		}
	}
}

// referenceRule is a rule of examples/fraud.yaml written in Go: a brute-force
// oracle for the example ruleset while the rules engine is being built.
type referenceRule struct {
	name   string
	mode   string // active or shadow
	when   string // the rule's expression, exactly as in the file
	action string
	match  func(h *userHistory, v value) bool
}

// minute is one minute in ms.
const minute = 60_000

var referenceRules = []referenceRule{
	{
		name: "many_ips", mode: "active", action: "block",
		when: `len(uniq(map(history("transactions", "5m"), .ip))) >= 3`,
		match: func(h *userHistory, v value) bool {
			ips := make(map[string]bool)
			window(h.tx, v.TS, 5*minute, func(e value) { ips[e.IP] = true })
			return len(ips) >= 3
		},
	},
	{
		name: "card_testing", mode: "active", action: "block",
		when: `count(history("transactions", "1m"), .amount <= 2) >= 5`,
		match: func(h *userHistory, v value) bool {
			n := 0
			window(h.tx, v.TS, minute, func(e value) {
				if e.Amount <= 2 {
					n++
				}
			})
			return n >= 5
		},
	},
	{
		name: "ato_spend", mode: "active", action: "block",
		when: `amount >= 1000 && count(history("logins", "30m"), .status == "FAILED") >= 3 && any(history("devices", "30m"), .event == "new_device")`,
		match: func(h *userHistory, v value) bool {
			if v.Amount < 1000 {
				return false
			}
			failed, fresh := 0, false
			window(h.logins, v.TS, 30*minute, func(e value) {
				if e.Status == "FAILED" {
					failed++
				}
			})
			window(h.devices, v.TS, 30*minute, func(e value) { fresh = fresh || e.Event == "new_device" })
			return failed >= 3 && fresh
		},
	},
	{
		name: "large_amount", mode: "shadow", action: "review",
		when:  `amount >= 2000`,
		match: func(_ *userHistory, v value) bool { return v.Amount >= 2000 },
	},
}

// ruleBlock returns the lines of rule name in the ruleset document: its key
// line and the more-indented lines after it.
func ruleBlock(doc, name string) string {
	_, rest, ok := strings.Cut(doc, "\n  "+name+":\n")
	if !ok {
		return ""
	}
	var b strings.Builder
	for line := range strings.Lines(rest) {
		if !strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "" {
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// TestExampleRulesetMatchesReference keeps the Go reference and
// examples/fraud.yaml in step: each reference rule is in the file with the
// same expression, mode and action.
func TestExampleRulesetMatchesReference(t *testing.T) {
	raw, err := os.ReadFile("../../examples/fraud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, r := range referenceRules {
		block := ruleBlock(doc, r.name)
		for _, want := range []string{
			"stream: transactions", "mode: " + r.mode, "action: " + r.action, "when: '" + r.when + "'",
		} {
			if !strings.Contains(block, "    "+want+"\n") {
				t.Errorf("rule %s in examples/fraud.yaml: no line %q in\n%s", r.name, want, block)
			}
		}
	}
	// Rules over a pattern's matches (history("ato", ...)) depend on the NFA
	// and have no Go reference here; they are tested through replay.
	got := 0
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "    when: ") && !strings.Contains(line, `history("ato"`) {
			got++
		}
	}
	if want := len(referenceRules); got != want {
		t.Errorf("examples/fraud.yaml has %d rules, the reference %d", got, want)
	}
}

// TestReferenceRules evaluates the example rules over a workload, deciding
// each transaction on arrival as the engine does: every planted transaction
// must be flagged by an active rule, and few transactions of normal users.
// Without -short it runs on the default workload, the one `vigil gen` writes.
func TestReferenceRules(t *testing.T) {
	var recs []record
	var planted []Planted
	if testing.Short() {
		w := scaledWorkload(t)
		recs, planted = w.recs, w.planted
	} else {
		recs, planted = generateParsed(t, Config{})
	}

	users := make(map[string]*userHistory)
	seen := make(map[string]bool)
	flagged := make(map[string]string) // tx_id flagged by an active rule → user_id
	fires := make(map[string]int)
	fraud := make(map[string]bool)
	for _, p := range planted {
		fraud[p.User] = true
	}
	var normalTx, normalFlagged, fraudOther int
	for _, r := range recs {
		v := r.Value
		h := users[v.UserID]
		if h == nil {
			h = &userHistory{}
			users[v.UserID] = h
		}
		switch r.Stream {
		case "logins":
			h.logins = append(h.logins, v)
			continue
		case "devices":
			h.devices = append(h.devices, v)
			continue
		}
		if seen[v.TxID] {
			continue // a duplicate: the engine returns the stored decision
		}
		seen[v.TxID] = true
		h.tx = append(h.tx, v)
		hit := false
		for _, rule := range referenceRules {
			if rule.match(h, v) {
				fires[rule.name]++
				hit = hit || rule.mode == "active"
			}
		}
		if hit {
			flagged[v.TxID] = v.UserID
		}
		if !fraud[v.UserID] {
			normalTx++
			if hit {
				normalFlagged++
			}
		}
	}

	var must int
	for _, p := range planted {
		for _, id := range p.TxIDs {
			must++
			if _, ok := flagged[id]; !ok {
				t.Errorf("%s of %s: %s not flagged", p.Kind, p.User, id)
			}
			delete(flagged, id)
		}
	}
	for _, user := range flagged {
		if fraud[user] {
			fraudOther++
		}
	}
	fp := float64(normalFlagged) / float64(normalTx)
	t.Logf("%d planted cases, %d planted transactions all flagged; rule fires %v", len(planted), must, fires)
	t.Logf("false positives: %d of %d transactions of normal users (%.4f%%); %d other transactions of fraud users flagged",
		normalFlagged, normalTx, 100*fp, fraudOther)
	if fp > 0.005 {
		t.Errorf("false-positive rate %.4f%%, want under 0.5%%", 100*fp)
	}
}
