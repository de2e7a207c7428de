package kafka

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// bigDocument returns rulesA with a comment that brings it to about n
// bytes: text that compresses well (as rule documents do), or random
// base64 that barely compresses.
func bigDocument(n int, compressible bool) []byte {
	var b bytes.Buffer
	b.WriteString(rulesA)
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 57)
	for i := 0; b.Len() < n; i++ {
		if compressible {
			fmt.Fprintf(&b, "# note %06d: the fraud team reviews this rule every quarter, with its hit rate\n", i)
			continue
		}
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		b.WriteString("# " + base64.StdEncoding.EncodeToString(raw) + "\n")
	}
	return b.Bytes()
}

// setMaxMessageBytes sets the rules topic's max.message.bytes.
func setMaxMessageBytes(t *testing.T, addr string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	v := fmt.Sprint(n)
	resp, err := kadm.NewClient(cl).AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}}, DefaultTopics.Rules)
	if err == nil {
		_, err = resp.On(DefaultTopics.Rules, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestPushRulesExpectedVersion: PushRules publishes only on top of the
// version it is told the document is based on.
func TestPushRulesExpectedVersion(t *testing.T) {
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, brokers, topic := context.Background(), []string{b.Addr()}, DefaultTopics.Rules
	if _, err := PushRules(ctx, kconf.Config{Brokers: brokers}, topic, []byte(rulesA), 1, "t", ""); !errors.Is(err, service.ErrVersionConflict) ||
		err.Error() != "the ruleset changed meanwhile: version 0 is live, not 1" {
		t.Fatalf("based on version 1 of an empty topic: %v", err)
	}
	if v, err := PushRules(ctx, kconf.Config{Brokers: brokers}, topic, []byte(rulesA), 0, "t", ""); err != nil || v.Number != 1 {
		t.Fatalf("first version: %v, %v", v, err)
	}
	if _, err := PushRules(ctx, kconf.Config{Brokers: brokers}, topic, []byte(rulesB), 0, "t", ""); !errors.Is(err, service.ErrVersionConflict) ||
		err.Error() != "the ruleset changed meanwhile: version 1 is live, not 0" {
		t.Fatalf("based on an older version: %v", err)
	}
	if v, err := PushRules(ctx, kconf.Config{Brokers: brokers}, topic, []byte(rulesB), 1, "t", ""); err != nil || v.Number != 2 {
		t.Fatalf("second version: %v, %v", v, err)
	}
	vs, err := ReadRules(ctx, kconf.Config{Brokers: brokers}, topic)
	if err != nil || len(vs) != 2 || vs[1].Document != rulesB {
		t.Fatalf("ReadRules: %d versions, %v", len(vs), err)
	}
}

// TestRulesetTooLarge: a version's record is compressed, so that a 1 MB
// document fits the default limit of 1 MiB; one that does not fit even
// compressed is refused with the topic's limit, by PushRules and by
// Publish, and nothing is published.
func TestRulesetTooLarge(t *testing.T) {
	var logs syncBuffer
	svc, addr := testService(t, rulesA, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ctx := context.Background()
	big := bigDocument(1_000_000, true)
	v, err := svc.Publish(ctx, big, 1, "t", "a long document")
	if err != nil || v.Number != 2 || len(v.Document) < 1_000_000 {
		t.Fatalf("a 1 MB document: %v", err)
	}

	setMaxMessageBytes(t, addr, 64<<10)
	random := bigDocument(200_000, false)
	check := func(what string, err error) {
		t.Helper()
		var tl *RulesetTooLargeError
		if !errors.As(err, &tl) {
			t.Fatalf("%s: %v, want a RulesetTooLargeError", what, err)
		}
		want := fmt.Sprintf("the ruleset is too large for vigil.rules: its record is %d bytes before compression and "+
			"exceeds the topic's limit of 65536 bytes (max.message.bytes) even compressed; make the document smaller, "+
			"or raise max.message.bytes of vigil.rules", tl.Bytes)
		if tl.Limit != 64<<10 || tl.Bytes < 200_000 || err.Error() != want {
			t.Errorf("%s: %v (limit %d, %d bytes)", what, err, tl.Limit, tl.Bytes)
		}
	}
	_, err = svc.Publish(ctx, random, 2, "t", "")
	check("Publish", err)
	_, err = PushRules(ctx, kconf.Config{Brokers: []string{addr}}, DefaultTopics.Rules, random, 2, "t", "")
	check("PushRules", err)
	if n := svc.Current().Number; n != 2 {
		t.Errorf("version %d is current after refusals, want 2", n)
	}
	vs, err := ReadRules(ctx, kconf.Config{Brokers: []string{addr}}, DefaultTopics.Rules)
	if err != nil || len(vs) != 2 {
		t.Errorf("the topic holds %d versions (%v), want 2", len(vs), err)
	}

	// The switch log lists the items each version adds, changes and removes.
	if _, err := svc.Publish(ctx, []byte(strings.Replace(rulesB, "never:", "later:", 1)), 2, "t", ""); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), "version=3"); {
		if time.Now().After(deadline) {
			t.Fatalf("no switch to version 3 logged:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the watcher's log
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "switched ruleset") && strings.Contains(line, "version=3") &&
			!strings.Contains(line, `added="[rules/fives rules/later]" changed=[] removed=[rules/never] inputs_added=[] inputs_removed=[]`) {
			t.Errorf("switch log: %s", line)
		}
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
