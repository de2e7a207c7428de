package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/kafka/kconf"
	"github.com/vigil-cep/vigil/rules"
)

// The rules topic is the ruleset's version history and source of truth
// (docs/design.md "Architecture"). Each record proposes version n on top of version n-1:
//
//	key   "v<n>-<random>"     unique, so compaction keeps every proposal
//	value {"version": n, "digest": …, "time": …, "author": …, "comment": …, "document": "<YAML or JSON>"}
//
// Reading the partition in offset order, a proposal is accepted when its
// version is one above the last accepted one and its document loads; any
// other (a concurrent proposal that lost, a document that does not load) is
// refused. Every instance applies the same rule to the same log, so all
// agree on the history without a coordinator; a publisher learns whether
// its proposal won by reading the log up to it.
//
// A record holds its whole document, so its size is bounded by the topic's
// max.message.bytes, which a broker checks against the compressed batch.
// Proposals are compressed with zstd (gzip on brokers older than Kafka
// 2.1): documents are text and shrink several times, so that what the REST
// API takes (a 1 MiB body, which item edits re-encode as indented JSON,
// larger) fits the default limit of 1 MiB. A record that still does not fit
// is refused with a RulesetTooLargeError naming the limit; nothing is
// published.

// rulesRecordMaxBytes bounds a proposal's record before compression (the
// client refuses larger ones itself). The broker's limit applies after
// compression, so this only has to stay above what any document rules.Load
// accepts (rules.MaxDocumentBytes, 4 MiB) can encode to: a JSON string
// escapes a byte into at most 6.
const rulesRecordMaxBytes = 32 << 20

// rulesProducerOpts are the options of a client that proposes versions.
func rulesProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.ProducerBatchCompression(kgo.ZstdCompression(), kgo.GzipCompression()),
		kgo.ProducerBatchMaxBytes(rulesRecordMaxBytes),
	}
}

// RulesetTooLargeError is returned by Publish and PushRules when a
// version's record does not fit the rules topic: the broker refused it as
// larger than the topic's max.message.bytes, even compressed. Nothing was
// published.
type RulesetTooLargeError struct {
	Topic string
	Bytes int   // the record's size before compression
	Limit int64 // the topic's max.message.bytes as the broker reports it; 0 if it could not be read
	Err   error // the refusal (kerr.MessageTooLarge)
}

func (e *RulesetTooLargeError) Error() string {
	limit := "the topic's limit (max.message.bytes)"
	if e.Limit > 0 {
		limit = fmt.Sprintf("the topic's limit of %d bytes (max.message.bytes)", e.Limit)
	}
	return fmt.Sprintf("the ruleset is too large for %s: its record is %d bytes before compression and exceeds %s "+
		"even compressed; make the document smaller, or raise max.message.bytes of %s", e.Topic, e.Bytes, limit, e.Topic)
}

func (e *RulesetTooLargeError) Unwrap() error { return e.Err }

// topicMaxMessageBytes reads a topic's max.message.bytes (the broker's
// default when the topic does not set it).
func topicMaxMessageBytes(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, err
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			return strconv.ParseInt(*c.Value, 10, 64)
		}
	}
	return 0, fmt.Errorf("topic %s reports no max.message.bytes", topic)
}

// RulesetVersion is one accepted version of the ruleset document.
type RulesetVersion struct {
	Number   int64     `json:"version"`
	Digest   string    `json:"digest"` // rules.Ruleset.Version: a hash of the document
	Time     time.Time `json:"time"`
	Author   string    `json:"author"`
	Comment  string    `json:"comment,omitempty"`
	Document string    `json:"document"`

	rs  *rules.Ruleset
	key string
}

// Ruleset returns the compiled version.
func (v *RulesetVersion) Ruleset() *rules.Ruleset { return v.rs }

// rulesLog is the accepted history, read from the rules topic.
type rulesLog struct {
	mu       sync.Mutex
	cond     *sync.Cond // broadcast when pos moves
	versions []*RulesetVersion
	pos      int64              // next offset to read
	opts     []rules.LoadOption // how versions load (the record limit of the cost bound)
}

func newRulesLog(opts ...rules.LoadOption) *rulesLog {
	l := &rulesLog{opts: opts}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// apply reads one record; it returns the version it accepted, or nil.
func (l *rulesLog) apply(r *kgo.Record) (*RulesetVersion, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v RulesetVersion
	err := json.Unmarshal(r.Value, &v)
	if err == nil && v.Number != int64(len(l.versions))+1 {
		err = fmt.Errorf("proposes version %d on top of version %d", v.Number, len(l.versions))
	}
	if err == nil {
		v.rs, err = rules.Load([]byte(v.Document), l.opts...)
	}
	if err != nil {
		return nil, err
	}
	v.key = string(r.Key)
	l.versions = append(l.versions, &v)
	return &v, nil
}

// done records that the record at off has been applied (the service runs
// what it accepted): publishers waiting on it learn their outcome.
func (l *rulesLog) done(off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pos = off + 1
	l.cond.Broadcast()
}

func (l *rulesLog) current() *RulesetVersion {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.versions) == 0 {
		return nil
	}
	return l.versions[len(l.versions)-1]
}

// version returns accepted version n, or nil.
func (l *rulesLog) version(n int64) *RulesetVersion {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n < 1 || n > int64(len(l.versions)) {
		return nil
	}
	return l.versions[n-1]
}

func (l *rulesLog) all() []*RulesetVersion {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.versions)
}

// outcome waits until the record at offset off has been applied, then says
// whether the proposal with key was accepted.
func (l *rulesLog) outcome(ctx context.Context, off int64, key string) (*RulesetVersion, error) {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cond.Broadcast()
	})
	defer stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.pos <= off {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		l.cond.Wait()
	}
	for _, v := range slices.Backward(l.versions) {
		if v.key == key {
			return v, nil
		}
	}
	return nil, service.ErrVersionConflict
}

// readRulesLog reads the rules topic from the start to its end, loading
// versions with opts.
func readRulesLog(ctx context.Context, kopts []kgo.Opt, adm *kadm.Client, topic string, opts ...rules.LoadOption) (*rulesLog, error) {
	if _, err := ensureTopics(ctx, adm, nil, Topics{Rules: topic}, 1); err != nil {
		return nil, err
	}
	end, err := endOffset(ctx, adm, topic, 0)
	if err != nil {
		return nil, err
	}
	l := newRulesLog(opts...)
	if end == 0 {
		return l, nil
	}
	cl, err := kgo.NewClient(append(slices.Clip(kopts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for l.pos < end {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return nil, fmt.Errorf("reading rules topic %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			l.apply(r)
			l.done(r.Offset)
		})
	}
	return l, nil
}

// propose writes a proposal of doc as the version after base and returns
// its key and offset.
func propose(ctx context.Context, cl *kgo.Client, topic string, base int64, doc []byte, rs *rules.Ruleset, author, comment string) (string, int64, error) {
	var nonce [6]byte
	rand.Read(nonce[:])
	v := RulesetVersion{Number: base + 1, Digest: rs.Version, Time: time.Now().UTC().Truncate(time.Millisecond),
		Author: author, Comment: comment, Document: string(doc)}
	val, err := json.Marshal(&v)
	if err != nil {
		return "", 0, err
	}
	key := fmt.Sprintf("v%d-%s", v.Number, hex.EncodeToString(nonce[:]))
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte(key), Value: val,
		Headers: []kgo.RecordHeader{{Key: "version", Value: fmt.Appendf(nil, "%d", v.Number)},
			{Key: "digest", Value: []byte(rs.Version)}}}).First()
	if errors.Is(err, kerr.MessageTooLarge) {
		tl := &RulesetTooLargeError{Topic: topic, Bytes: len(key) + len(val), Err: err}
		tl.Limit, _ = topicMaxMessageBytes(ctx, kadm.NewClient(cl), topic) // the message says so without it
		return "", 0, tl
	}
	if err != nil {
		return "", 0, fmt.Errorf("publish on %s: %w", topic, err)
	}
	return key, r.Offset, nil
}

// ReadRules returns the accepted versions on the rules topic, oldest first
// (none when nothing was published): what a service starting now would
// load. It creates the topic when it is missing.
func ReadRules(ctx context.Context, kc kconf.Config, topic string) ([]*RulesetVersion, error) {
	kopts, err := kc.Opts()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if err := kc.Check(ctx, kopts); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	l, err := readRulesLog(ctx, kopts, kadm.NewClient(cl), topic)
	if isAuthorization(err) {
		return nil, kc.Explain(fmt.Errorf("read %s: %w", topic, err))
	}
	if err != nil {
		return nil, err
	}
	return l.all(), nil
}

// PushRules publishes doc as the version after expect on the rules topic
// (vigil rules push), as Publish does in the service: it returns an error
// wrapping service.ErrVersionConflict when the current version is not expect (0: the
// topic is empty), or when another proposal wins the race, so that a
// document based on an older version never silently replaces the changes
// made since. A document that does not load is refused with every error,
// one that does not fit the topic with a *RulesetTooLargeError; nothing is
// published then.
//
// The author recorded is the principal kc authenticates as (its SASL user)
// when it has one: the broker vouches for it, where a name typed on a
// command line vouches for nothing. Without SASL it is author, marked
// "unauthenticated:".
func PushRules(ctx context.Context, kc kconf.Config, topic string, doc []byte, expect int64, author, comment string) (*RulesetVersion, error) {
	kopts, err := kc.Opts()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if err := kc.Check(ctx, kopts); err != nil {
		return nil, err
	}
	if p := kc.Principal(); p != "" {
		author = p
	} else {
		author = "unauthenticated:" + author
	}
	v, err := pushRules(ctx, kopts, topic, doc, expect, author, comment)
	if isAuthorization(err) {
		return nil, kc.Explain(fmt.Errorf("publish on %s: %w", topic, err))
	}
	return v, err
}

// isAuthorization reports an error of the broker's ACLs.
func isAuthorization(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed)
}

// pushRules is PushRules over a client with kopts, recording author as given.
func pushRules(ctx context.Context, kopts []kgo.Opt, topic string, doc []byte, expect int64, author, comment string) (*RulesetVersion, error) {
	rs, err := rules.Load(doc)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(append(slices.Clip(kopts), rulesProducerOpts()...), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	l, err := readRulesLog(ctx, kopts, adm, topic)
	if err != nil {
		return nil, err
	}
	if cur := int64(len(l.versions)); cur != expect {
		return nil, fmt.Errorf("%w: version %d is live, not %d", service.ErrVersionConflict, cur, expect)
	}
	key, off, err := propose(ctx, cl, topic, expect, doc, rs, author, comment)
	if err != nil {
		return nil, err
	}
	if l, err = readRulesLog(ctx, kopts, adm, topic); err != nil {
		return nil, err
	}
	v, err := l.outcome(ctx, off, key)
	if errors.Is(err, service.ErrVersionConflict) {
		return nil, fmt.Errorf("%w: another version was published on top of %d meanwhile", service.ErrVersionConflict, expect)
	}
	return v, err
}

// loadOptions are how the service loads rulesets: the cost bound assumes
// its record limit.
func (s *Service) loadOptions() []rules.LoadOption {
	return []rules.LoadOption{rules.MaxRecordBytes(s.cfg.MaxRecordBytes)}
}

// Versions returns every accepted ruleset version, oldest first.
func (s *Service) Versions() []*RulesetVersion { return s.rulesLog.all() }

// Current returns the running ruleset version.
func (s *Service) Current() *RulesetVersion { return s.rulesLog.current() }

// Publish proposes doc as the version after expect and waits until the log
// says whether it was accepted; every instance then switches to it. It
// returns service.ErrVersionConflict when the current version is not expect, or when
// another proposal won; a rules.ErrorList when doc does not load.
func (s *Service) Publish(ctx context.Context, doc []byte, expect int64, author, comment string) (*RulesetVersion, error) {
	rs, err := rules.Load(doc, s.loadOptions()...)
	if err != nil {
		return nil, err
	}
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	if cur := s.rulesLog.current(); cur == nil || cur.Number != expect {
		return nil, service.ErrVersionConflict
	}
	key, off, err := propose(ctx, s.rulesCl, s.cfg.Topics.Rules, expect, doc, rs, author, comment)
	if err != nil {
		return nil, err
	}
	return s.rulesLog.outcome(ctx, off, key)
}

// watchRules follows the rules topic from where New left it and switches the
// service to every version accepted (docs/design.md "Architecture": rules topic → every task
// hot-swaps). A proposal that is refused leaves the running version.
func (s *Service) watchRules(ctx context.Context) {
	topic := s.cfg.Topics.Rules
	cl, err := s.client(kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(s.rulesLog.pos)}}))
	if err != nil {
		s.failWith(fmt.Errorf("watch %s: %w", topic, err))
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			defer s.rulesLog.done(r.Offset) // after the switch: Publish returns once it runs
			v, err := s.rulesLog.apply(r)
			if err != nil {
				s.log.Error("refused a ruleset proposal on the rules topic; the running version stays",
					"offset", r.Offset, "key", string(r.Key), "err", err)
				return
			}
			s.switchRules(ctx, v)
		})
	}
}

// switchRules makes the service run version v.
func (s *Service) switchRules(ctx context.Context, v *RulesetVersion) {
	rs, old := v.rs, s.Ruleset()
	if rs.Version == old.Version {
		return
	}
	inputs := InputTopics(rs)
	// Output topics exist since the start; new inputs are created (or
	// checked for co-partitioning) before any task reads them.
	if _, err := ensureTopics(ctx, s.adm, inputs, s.cfg.Topics, s.cfg.Partitions); err != nil {
		s.log.Error("cannot run ruleset version; the running version stays", "version", v.Number, "err", err)
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
	// What the version changes, item by item ("rules/fives"), against the
	// version it was proposed on top of, as the audit log shows it.
	var prev []byte
	if p := s.rulesLog.version(v.Number - 1); p != nil {
		prev = []byte(p.Document)
	}
	changes, err := rulesdoc.DiffDocuments(prev, []byte(v.Document))
	if err != nil {
		s.log.Warn("cannot list the changes of a ruleset version", "version", v.Number, "err", err)
	}
	s.log.Info("switched ruleset", "version", v.Number, "digest", rs.Version, "author", v.Author,
		"added", rulesdoc.Names(changes, rulesdoc.Added), "changed", rulesdoc.Names(changes, rulesdoc.Changed),
		"removed", rulesdoc.Names(changes, rulesdoc.Removed), "inputs_added", added, "inputs_removed", removed)
}

// endOffset returns the offset after the last record of a partition. A
// topic created a moment ago may not be in the metadata yet: it retries for
// a few seconds.
func endOffset(ctx context.Context, adm *kadm.Client, topic string, part int32) (int64, error) {
	return partitionEnd(ctx, adm.ListEndOffsets, topic, part)
}

// stableOffset is endOffset for a read_committed reader: the partition's
// last stable offset, before the first transaction still open.
func stableOffset(ctx context.Context, adm *kadm.Client, topic string, part int32) (int64, error) {
	return partitionEnd(ctx, adm.ListCommittedOffsets, topic, part)
}

func partitionEnd(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string, part int32) (int64, error) {
	var last error
	// A topic created a moment ago is often missing from the first answer
	// (the client's metadata predates it): retry soon, then back off.
	wait := 5 * time.Millisecond
	for range 40 {
		ends, err := list(ctx, topic)
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
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
	return 0, fmt.Errorf("end offset of %s/%d: %w", topic, part, last)
}
