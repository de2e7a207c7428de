package kafka

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/rules"
)

// rulesKey is the key of every record on the rules topic: the topic is
// compacted, so the latest version is what survives.
const rulesKey = "ruleset"

// loadRules returns the latest ruleset document on the rules topic. When the
// topic is empty it publishes seed (which must load) and returns it.
func loadRules(ctx context.Context, brokers []string, adm *kadm.Client, topic string, seed []byte, log *slog.Logger) ([]byte, string, error) {
	if _, err := ensureRulesTopic(ctx, adm, topic); err != nil {
		return nil, "", err
	}
	src, version, err := latestRules(ctx, brokers, adm, topic)
	if err != nil {
		return nil, "", err
	}
	if src != nil {
		if seed != nil && !bytes.Equal(seed, src) {
			log.Info("the rules topic holds a ruleset already; --rules only seeds an empty topic (use `vigil rules push`)",
				"topic", topic, "version", version)
		}
		return src, version, nil
	}
	if seed == nil {
		return nil, "", fmt.Errorf("no ruleset: %s is empty; pass --rules FILE to seed it", topic)
	}
	rs, err := PushRules(ctx, brokers, topic, seed)
	if err != nil {
		return nil, "", err
	}
	log.Info("seeded the rules topic", "topic", topic, "version", rs.Version)
	return seed, rs.Version, nil
}

func ensureRulesTopic(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	counts, err := ensureTopics(ctx, adm, nil, Topics{Rules: topic}, 1)
	if err != nil {
		return 0, err
	}
	return counts[topic], nil
}

// latestRules reads the newest record of the rules topic; nil when empty.
func latestRules(ctx context.Context, brokers []string, adm *kadm.Client, topic string) ([]byte, string, error) {
	end, err := endOffset(ctx, adm, topic, 0)
	if err != nil {
		return nil, "", err
	}
	if end == 0 {
		return nil, "", nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(end - 1)}}))
	if err != nil {
		return nil, "", err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return nil, "", fmt.Errorf("reading rules topic %s: %w", topic, err)
		}
		var last *kgo.Record
		fs.EachRecord(func(r *kgo.Record) { last = r })
		if last != nil {
			return last.Value, header(last, "version"), nil
		}
	}
}

// PushRules validates a ruleset document and publishes it on the rules topic
// as the new version. A document that does not load is refused with every
// error, and nothing is published.
func PushRules(ctx context.Context, brokers []string, topic string, src []byte) (*rules.Ruleset, error) {
	rs, err := rules.Load(src)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: topic, Key: []byte(rulesKey), Value: src,
		Headers: []kgo.RecordHeader{{Key: "version", Value: []byte(rs.Version)}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return nil, fmt.Errorf("publish ruleset on %s: %w", topic, err)
	}
	return rs, nil
}

// endOffset returns the offset after the last record of a partition. A
// topic created a moment ago may not be in the metadata yet: it retries for
// a few seconds.
func endOffset(ctx context.Context, adm *kadm.Client, topic string, part int32) (int64, error) {
	var last error
	for range 50 {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			end, ok := ends.Lookup(topic, part)
			if ok && end.Err == nil {
				return end.Offset, nil
			}
			err = end.Err
			if err == nil {
				err = fmt.Errorf("no partition %d", part)
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("end offset of %s/%d: %w", topic, part, last)
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
