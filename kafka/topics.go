package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/vigil-cep/vigil/rules"
)

// Topics names the output topics and the rules topic (docs/design.md "Architecture").
type Topics struct {
	Decisions string // decision records, key = decision id
	Alerts    string // pattern matches and timeouts
	Joins     string // interval-join pairs
	Windows   string // window results
	Late      string // late side output
	DLQ       string // unreadable records
	Rules     string // the ruleset's source of truth, compacted
	// Checkpoints holds task snapshots when the checkpoint store is Kafka
	// (one partition per task; not an output).
	Checkpoints string
}

// DefaultTopics are the names used when none are configured.
var DefaultTopics = Topics{
	Decisions:   "vigil.decisions",
	Alerts:      "vigil.alerts",
	Joins:       "vigil.joins",
	Windows:     "vigil.windows",
	Late:        "vigil.late",
	DLQ:         "vigil.dlq",
	Rules:       "vigil.rules",
	Checkpoints: "vigil.checkpoints",
}

// WithSuffix returns the names with suffix appended to every one, the rules
// and checkpoint topics included: a second service on the same broker that
// shares nothing with the first (vigil bench runs several).
func (t Topics) WithSuffix(suffix string) Topics {
	for _, name := range []*string{&t.Decisions, &t.Alerts, &t.Joins, &t.Windows, &t.Late, &t.DLQ, &t.Rules, &t.Checkpoints} {
		*name += suffix
	}
	return t
}

// outputs lists the output topics (not the rules topic), in a fixed order.
func (t Topics) outputs() []string {
	return []string{t.Decisions, t.Alerts, t.Joins, t.Windows, t.Late, t.DLQ}
}

// InputTopics returns the topics of the ruleset's input streams, sorted and
// without repeats (two streams may not share a topic; rules checks that).
func InputTopics(rs *rules.Ruleset) []string {
	var ts []string
	for _, st := range rs.Streams {
		if st.Input() && st.Topic != "" {
			ts = append(ts, st.Topic)
		}
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// ensureTopics creates the topics that are missing — inputs and outputs with
// partitions partitions, the rules topic with one, compacted — and checks
// co-partitioning: every input topic must have the same partition count,
// since task p reads partition p of each (docs/design.md "Architecture"). It returns the
// partition count of every topic.
func ensureTopics(ctx context.Context, adm *kadm.Client, inputs []string, t Topics, partitions int32) (map[string]int32, error) {
	all := append(slices.Clone(inputs), t.outputs()...)
	all = slices.DeleteFunc(append(all, t.Rules), func(s string) bool { return s == "" })
	counts, err := partitionCounts(ctx, adm, all)
	if err != nil {
		return nil, err
	}
	// An input that exists fixes the count of the ones we create.
	for _, in := range inputs {
		if n, ok := counts[in]; ok {
			partitions = n
			break
		}
	}
	for _, name := range all {
		if _, ok := counts[name]; ok {
			continue
		}
		n, cfg := partitions, map[string]*string(nil)
		if name == t.Rules {
			compact := "compact"
			n, cfg = 1, map[string]*string{"cleanup.policy": &compact}
		}
		resp, err := adm.CreateTopic(ctx, n, -1, cfg, name)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("create topic %s: %w", name, err)
		}
		if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("create topic %s: %w", name, resp.Err)
		}
		counts[name] = n
	}
	var bad []string
	for _, in := range inputs {
		if counts[in] != counts[inputs[0]] {
			bad = append(bad, fmt.Sprintf("%s has %d", in, counts[in]))
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("input topics are not co-partitioned: %s has %d partitions, %s "+
			"(every input topic needs the same partition count: task p reads partition p of each)",
			inputs[0], counts[inputs[0]], strings.Join(bad, ", "))
	}
	return counts, nil
}

// partitionCounts returns the partition count of each topic that exists.
func partitionCounts(ctx context.Context, adm *kadm.Client, topics []string) (map[string]int32, error) {
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	counts := make(map[string]int32)
	for name, d := range md {
		if d.Err != nil {
			if errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("topic %s: %w", name, d.Err)
		}
		counts[name] = int32(len(d.Partitions))
	}
	return counts, nil
}
