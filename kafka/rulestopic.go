package kafka

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/rules"
)

// rulesKey is the key of every record on the rules topic: the topic is
// compacted, so the latest version is what survives.
const rulesKey = "ruleset"

// loadRules returns the latest ruleset document on the rules topic and the
// offset after it. When the topic is empty it publishes seed (which must
// load) and returns it.
func loadRules(ctx context.Context, brokers []string, adm *kadm.Client, topic string, seed []byte, log *slog.Logger) ([]byte, string, int64, error) {
	if _, err := ensureRulesTopic(ctx, adm, topic); err != nil {
		return nil, "", 0, err
	}
	src, version, err := latestRules(ctx, brokers, adm, topic)
	if err != nil {
		return nil, "", 0, err
	}
	if src != nil {
		if seed != nil && !bytes.Equal(seed, src) {
			log.Info("the rules topic holds a ruleset already; --rules only seeds an empty topic (use `vigil rules push`)",
				"topic", topic, "version", version)
		}
	} else {
		if seed == nil {
			return nil, "", 0, fmt.Errorf("no ruleset: %s is empty; pass --rules FILE to seed it", topic)
		}
		rs, err := PushRules(ctx, brokers, topic, seed)
		if err != nil {
			return nil, "", 0, err
		}
		log.Info("seeded the rules topic", "topic", topic, "version", rs.Version)
		src, version = seed, rs.Version
	}
	// Versions published from here on are watched (Service.watchRules).
	end, err := endOffset(ctx, adm, topic, 0)
	if err != nil {
		return nil, "", 0, err
	}
	return src, version, end, nil
}

// watchRules follows the rules topic and switches the service to every
// version published on it (DESIGN §2: rules topic → every task hot-swaps).
// A document that does not load is refused and logged; the running version
// stays.
func (s *Service) watchRules(ctx context.Context) {
	topic := s.cfg.Topics.Rules
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.cfg.Brokers...), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(s.rulesEnd)}}))
	if err != nil {
		s.failWith(fmt.Errorf("watch %s: %w", topic, err))
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { s.applyRules(ctx, r) })
	}
}

func (s *Service) applyRules(ctx context.Context, r *kgo.Record) {
	rs, err := rules.Load(r.Value)
	if err != nil {
		s.log.Error("refused a ruleset published on the rules topic; the running version stays",
			"offset", r.Offset, "running", s.Ruleset().Version, "err", err)
		return
	}
	old := s.Ruleset()
	if rs.Version == old.Version {
		return
	}
	inputs := InputTopics(rs)
	if len(inputs) == 0 {
		s.log.Error("refused a ruleset with no input stream; the running version stays", "version", rs.Version)
		return
	}
	// Output topics exist since the start; new inputs are created (or
	// checked for co-partitioning) before any task reads them.
	if _, err := ensureTopics(ctx, s.adm, inputs, s.cfg.Topics, s.cfg.Partitions); err != nil {
		s.log.Error("refused ruleset "+rs.Version+"; the running version stays", "err", err)
		return
	}
	var added, removed []string
	for _, in := range inputs {
		if !slices.Contains(InputTopics(old), in) {
			added = append(added, in)
		}
	}
	for _, in := range InputTopics(old) {
		if !slices.Contains(inputs, in) {
			removed = append(removed, in)
		}
	}
	s.setRuleset(rs)
	if len(added) > 0 {
		s.cl.AddConsumeTopics(added...)
	}
	if len(removed) > 0 {
		s.cl.PurgeTopicsFromConsuming(removed...)
	}
	s.log.Info("switched ruleset", "from", old.Version, "to", rs.Version, "added", added, "removed", removed)
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
