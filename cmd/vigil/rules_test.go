package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

const pushPullRules = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  huge: {stream: tx, action: review, when: 'amount > 100000'}
`

// TestRulesPullPush: against a running vigil serve, `vigil rules push`
// refuses a file based on a version older than the live one (a rule was
// added over REST since) and says what it would undo; a file pulled from the
// live version is pushed, with its changes listed, and records the new
// version; --force overrides; the service logs what each version adds and
// removes.
func TestRulesPullPush(t *testing.T) {
	t.Setenv("USER", "tester") // the author of an unauthenticated push
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(pushPullRules), 0o644)
	p, line := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0", "--rules", rulesPath,
		"--data-dir", filepath.Join(dir, "state"))
	broker := strings.Fields(line)[5] // "vigil serving ruleset D on BROKERS (…)"
	c := &apiClient{t: t, base: strings.TrimSuffix(lastField(line), ")")}
	for i := 0; ; i++ {
		if resp, _ := c.do("GET", "/readyz", ""); resp.StatusCode == 200 {
			break
		}
		if i == 300 {
			t.Fatal("/readyz not 200 after 30s")
		}
		time.Sleep(100 * time.Millisecond) // polling the service's group join
	}
	pulled := filepath.Join(dir, "pulled.yaml")
	pull := func() {
		t.Helper()
		if code, out, stderr := runCLI(t, "rules", "pull", "--brokers", broker, "--out", pulled); code != 0 {
			t.Fatalf("pull: exit %d: %s %s", code, out, stderr)
		}
	}
	edit := func(old, new string) {
		t.Helper()
		b, _ := os.ReadFile(pulled)
		os.WriteFile(pulled, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644)
	}
	push := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append([]string{"rules", "push", "--brokers", broker}, args...)...)
	}
	mustContain := func(what, got string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q:\n%s", what, w, got)
			}
		}
	}

	pull()
	b, _ := os.ReadFile(pulled)
	if !strings.HasPrefix(string(b), "# vigil:base-version=1  (vigil rules pull from vigil.rules, digest ") ||
		!strings.HasSuffix(string(b), "\n"+pushPullRules) {
		t.Fatalf("pulled file:\n%s", b)
	}
	// A rule authored over REST after the file was pulled.
	if resp, body := c.do("POST", "/v1/rules", `{"name":"fives","stream":"tx","action":"block","when":"amount == 5"}`, "If-Match", `"1"`); resp.StatusCode != 201 {
		t.Fatalf("POST /v1/rules: %d %s", resp.StatusCode, body)
	}
	edit("amount > 100000", "amount > 50000")
	code, _, stderr := push(pulled)
	if code != 1 {
		t.Fatalf("stale push: exit %d, %s", code, stderr)
	}
	mustContain("the stale push's refusal", stderr,
		"vigil rules push: refused: "+pulled+" is based on version 1, but version 2 is live: pushing it would undo what changed since.\n",
		"version 2 was published by anonymous at ",
		"changes to version 2:\n  - rules/fives\n  ~ rules/huge: when\n",
		"push with --force.\nnothing published\n")
	code, _, stderr = push(rulesPath)
	if code != 1 {
		t.Fatalf("push without a base: exit %d, %s", code, stderr)
	}
	mustContain("the refusal of a file without a base", stderr,
		rulesPath+" records no version it is based on (it was not written by `vigil rules pull`), and version 2 is live: pushing it would replace that version whole.",
		"  - rules/fives\n")

	// Pulled again: the REST rule is in the file, and the push keeps it.
	pull()
	edit("amount > 100000", "amount > 50000")
	code, out, stderr := push("--comment", "lower the bar", pulled)
	if code != 0 {
		t.Fatalf("push: exit %d: %s %s", code, out, stderr)
	}
	mustContain("the push's output", out, "changes to version 2:\n  ~ rules/huge: when\npublished ruleset version 3 ",
		pulled+" now records version 3\n")
	if b, _ := os.ReadFile(pulled); !strings.HasPrefix(string(b), "# vigil:base-version=3 ") {
		t.Errorf("the pushed file records:\n%s", b)
	}
	if code, out, _ := push(pulled); code != 0 || !strings.Contains(out, "is version 3 already: nothing to publish") {
		t.Errorf("pushing the live version again: exit %d, %s", code, out)
	}
	if code, out, stderr := push("--base-version", "2", rulesPath); code != 1 || !strings.Contains(stderr, rulesPath+" is based on version 2, but version 3 is live") {
		t.Errorf("--base-version 2: exit %d, %s %s", code, out, stderr)
	}
	code, out, stderr = push("--force", rulesPath)
	if code != 0 {
		t.Fatalf("--force: exit %d: %s %s", code, out, stderr)
	}
	mustContain("the forced push's output", out, "changes to version 3:\n  - rules/fives\n  ~ rules/huge: when\npublished ruleset version 4 ")

	// The service's log says what each version did.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.logs(), "version=4"); {
		if time.Now().After(deadline) {
			t.Fatalf("no switch to version 4 logged:\n%s", p.logs())
		}
		time.Sleep(50 * time.Millisecond) // polling the service's log
	}
	switched := map[string]string{} // version -> its "switched ruleset" line
	for _, l := range strings.Split(p.logs(), "\n") {
		if !strings.Contains(l, `msg="switched ruleset"`) {
			continue
		}
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "version=") {
				switched[f] = l
			}
		}
	}
	for v, want := range map[string]string{
		"version=2": "author=anonymous added=[rules/fives] changed=[] removed=[] ",
		"version=3": "author=unauthenticated:tester added=[] changed=[rules/huge] removed=[] ",
		"version=4": "author=unauthenticated:tester added=[] changed=[rules/huge] removed=[rules/fives] ",
	} {
		mustContain("the switch log of "+v, switched[v], want)
	}

	for _, args := range [][]string{{"rules", "push", "--help"}, {"rules", "pull", "--help"}} {
		if code, _, stderr := runCLI(t, args...); code != 0 || !strings.Contains(stderr, "Usage: vigil "+args[0]+" "+args[1]) {
			t.Errorf("vigil %v: exit %d, %s", args, code, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "rules", "push", "--force", "--base-version", "3", pulled); code != 2 || !strings.Contains(stderr, "give --base-version or --force, not both") {
		t.Errorf("--force with --base-version: exit %d, %s", code, stderr)
	}
}

// TestRulesPushTooLarge: a document whose record does not fit the rules
// topic even compressed is refused with the topic's limit, and nothing is
// published; a valid 1 MB document fits the default limit, compressed.
func TestRulesPushTooLarge(t *testing.T) {
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	compact, limit := "compact", "65536"
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, -1,
		map[string]*string{"cleanup.policy": &compact, "max.message.bytes": &limit}, "vigil.rules"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	doc := []byte(pushPullRules)
	rng := rand.New(rand.NewPCG(7, 7))
	raw := make([]byte, 57)
	for len(doc) < 200_000 { // random text: it hardly compresses
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		doc = append(doc, "# "+base64.StdEncoding.EncodeToString(raw)+"\n"...)
	}
	random := filepath.Join(dir, "random.yaml")
	os.WriteFile(random, doc, 0o644)
	code, _, stderr := runCLI(t, "rules", "push", "--brokers", b.Addr(), random)
	if code != 1 || !strings.Contains(stderr, "vigil rules push: refused: the ruleset is too large for vigil.rules: its record is ") ||
		!strings.Contains(stderr, " bytes before compression and exceeds the topic's limit of 65536 bytes (max.message.bytes) even compressed; "+
			"make the document smaller, or raise max.message.bytes of vigil.rules\nnothing published\n") {
		t.Errorf("too large: exit %d, %s", code, stderr)
	}
	if vs, err := kafka.ReadRules(context.Background(), kconf.Config{Brokers: []string{b.Addr()}}, "vigil.rules"); err != nil || len(vs) != 0 {
		t.Errorf("vigil.rules holds %d versions (%v), want none", len(vs), err)
	}

	var notes bytes.Buffer
	notes.WriteString(pushPullRules)
	for i := 0; notes.Len() < 1_000_000; i++ {
		fmt.Fprintf(&notes, "# note %06d: the fraud team reviews this rule every quarter, with its hit rate\n", i)
	}
	long := filepath.Join(dir, "long.yaml")
	os.WriteFile(long, notes.Bytes(), 0o644)
	code, out, stderr := runCLI(t, "rules", "push", "--brokers", b.Addr(), "--rules-topic", "vigil.rules.default-limit", long)
	if code != 0 || !strings.Contains(out, "published ruleset version 1") {
		t.Errorf("a 1 MB document: exit %d, %s %s", code, out, stderr)
	}
}

func TestSplitBaseVersion(t *testing.T) {
	for _, c := range []struct {
		src, body string
		base      int64
		ok        bool
	}{
		{"# vigil:base-version=7  (vigil rules pull …)\nstreams: {}\n", "streams: {}\n", 7, true},
		{"# vigil:base-version=12\n{\"rules\": {}}", "{\"rules\": {}}", 12, true},
		{"# vigil:base-version=\nstreams: {}\n", "# vigil:base-version=\nstreams: {}\n", 0, false},
		{"# a comment\n# vigil:base-version=3\n", "# a comment\n# vigil:base-version=3\n", 0, false},
		{"streams: {}\n", "streams: {}\n", 0, false},
		{"", "", 0, false},
	} {
		base, body, ok := splitBaseVersion([]byte(c.src))
		if base != c.base || string(body) != c.body || ok != c.ok {
			t.Errorf("splitBaseVersion(%q) = %d, %q, %v; want %d, %q, %v", c.src, base, body, ok, c.base, c.body, c.ok)
		}
	}
}
