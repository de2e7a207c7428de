package kafka

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

// TestRulesetTooLarge: a version's record is compressed, so that a 1 MB
// document fits the default limit of 1 MiB; one that does not fit even
// compressed is refused with the topic's limit, by PushRules and by
// Publish, and nothing is published.
func TestRulesetTooLarge(t *testing.T) {
	svc, addr := testService(t, rulesA)
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
	_, err = PushRules(ctx, []string{addr}, DefaultTopics.Rules, random, "t", "")
	check("PushRules", err)
	if n := svc.Current().Number; n != 2 {
		t.Errorf("version %d is current after refusals, want 2", n)
	}
}
