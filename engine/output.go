package engine

import (
	"strconv"

	"github.com/vigil-cep/vigil/internal/jsonv"
)

// Kind names an output record's kind: the "kind" field of the records of
// docs/design.md "Output records", and the topic it goes to.
type Kind uint8

// Output kinds.
const (
	KindDecision Kind = iota
	KindWindow
	KindLate
	KindDLQ
	KindMatch
	KindTimeout
	KindJoin

	// KindCount is the number of kinds.
	KindCount
)

func (k Kind) String() string {
	return [...]string{"decision", "window", "late", "dlq", "match", "timeout", "join"}[k]
}

// Output is one record the task emits. Value is its JSON record
// (docs/design.md "Output records"); Key is its Kafka key (the decision id,
// or the entity key). Both are only valid during the Emit call: a sink that
// keeps them copies them.
type Output struct {
	Kind  Kind
	Key   string
	Value []byte
	// Decision summarises a decision made now (not a re-emitted one), for
	// metrics; nil otherwise. Valid during the emit call only.
	Decision *DecisionInfo
	// Stream and Reason are, for KindDLQ, the stream (or topic) the refused
	// record named and why it was refused, as its record says them.
	Stream, Reason string
	// Index is the position, in the batch given to Task.Process, of the
	// record that caused the output; -1 for an output of Tick, Finish or
	// RaiseWatermark, or of Decide.
	Index int
}

// DecisionInfo is what metrics read of a decision.
type DecisionInfo struct {
	Action string    // allow, review, block
	Hits   []RuleHit // the rules that matched or failed, in evaluation order
}

// RuleHit is one rule's part in a decision.
type RuleHit struct {
	Rule, Mode string
	Err        bool // the rule failed at run time
}

// The encoders below write the records of docs/design.md "Output records"
// field by field in a fixed order, so that replaying the same input gives the
// same bytes.

func appendField(dst []byte, name string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

func appendInt(dst []byte, name string, v int64) []byte {
	return strconv.AppendInt(appendField(dst, name), v, 10)
}

func appendStr(dst []byte, name, v string) []byte {
	return jsonv.AppendString(appendField(dst, name), v)
}

func appendRaw(dst []byte, name, raw string) []byte {
	return append(appendField(dst, name), raw...)
}

func appendKind(dst []byte, k Kind) []byte {
	dst = append(dst, `{"kind":"`...)
	dst = append(dst, k.String()...)
	return append(dst, '"')
}
