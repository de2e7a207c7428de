package telemetry

import "strings"

// DLQReason is the reason_class label of vigil_dlq_total: why a record went
// to the dead-letter queue, from a small fixed set so that the label stays
// low-cardinality whatever the error text says.
type DLQReason uint8

// The DLQ reason classes. ReasonOther is the zero value and the class of
// anything the classifier does not recognise.
const (
	ReasonOther         DLQReason = iota // not recognised
	ReasonDecode                         // the value is not a JSON object
	ReasonKey                            // the key expression failed or gave no key
	ReasonTime                           // no readable event time
	ReasonID                             // the id expression failed or gave no id
	ReasonSize                           // the record is larger than the limit
	ReasonRule                           // a rule, window or enrichment expression failed at run time
	ReasonUnknownStream                  // no stream of the running ruleset reads the topic
	ReasonSkew                           // event time too far ahead of processing time (max_future_skew)
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonOther:         "other",
	ReasonDecode:        "decode",
	ReasonKey:           "key",
	ReasonTime:          "time",
	ReasonID:            "id",
	ReasonSize:          "size",
	ReasonRule:          "rule",
	ReasonUnknownStream: "unknown_stream",
	ReasonSkew:          "skew",
}

// String returns the label value of r ("decode", "unknown_stream", …); an
// out-of-range r is "other".
func (r DLQReason) String() string {
	if r >= numReasons {
		return reasonNames[ReasonOther]
	}
	return reasonNames[r]
}

// dlqPrefixes maps the start of the engine's and the Kafka source's DLQ
// error texts to their class. Order matters: "event time … max_future_skew"
// must win over "time ".
var dlqPrefixes = []struct {
	prefix string
	reason DLQReason
}{
	{"event time ", ReasonSkew},
	{"unknown stream ", ReasonUnknownStream},
	{"value is not JSON", ReasonDecode},
	{"value must be a JSON object", ReasonDecode},
	{"record of ", ReasonSize},
	{"key ", ReasonKey},
	{"time ", ReasonTime},
	{"id ", ReasonID},
	{"window ", ReasonRule},
	{"rule ", ReasonRule},
	{"enrichment ", ReasonRule},
}

// ClassifyDLQ returns the class of a DLQ error text, as written by the
// engine ("value is not JSON: …", "key user_id is missing or null",
// "event time … is more than max_future_skew …", "record of N bytes exceeds
// the M-byte limit", "unknown stream \"x\"", "window w where: …"). A text
// it does not recognise is ReasonOther. The texts are matched by prefix, with
// a fallback on a few keywords, so keep them stable or pass the class
// directly where the caller knows it. It does not allocate.
func ClassifyDLQ(msg string) DLQReason {
	for _, p := range dlqPrefixes {
		if strings.HasPrefix(msg, p.prefix) {
			return p.reason
		}
	}
	switch {
	case strings.Contains(msg, "max_future_skew"):
		return ReasonSkew
	case strings.Contains(msg, "byte limit"):
		return ReasonSize
	case strings.Contains(msg, "JSON"):
		return ReasonDecode
	}
	return ReasonOther
}
