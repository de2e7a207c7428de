package telemetry

import "testing"

func TestClassifyDLQ(t *testing.T) {
	// The texts the engine and the Kafka source write today.
	for _, c := range []struct {
		msg  string
		want string
	}{
		{`value is not JSON: invalid character 'x' looking for beginning of value`, "decode"},
		{`value must be a JSON object, not an array`, "decode"},
		{`key user_id is missing or null`, "key"},
		{`key user_id must be a string or a number, not bool`, "key"},
		{`time ts is missing or null`, "time"},
		{`time ts: "yesterday" is not an RFC 3339 time`, "time"},
		{`id tx_id is missing, null or empty`, "id"},
		{`record of 2000000 bytes exceeds the 1048576-byte limit`, "size"},
		{`window per_minute where: invalid operation`, "rule"},
		{`enrichment profile: lookup failed`, "rule"},
		{`unknown stream "payments"`, "unknown_stream"},
		{`event time 2030-01-01T00:00:00Z is more than max_future_skew 1h0m0s ahead of processing time 2026-01-01T00:00:00Z`, "skew"},
		{`decode stage: max_future_skew exceeded`, "skew"},
		{`something else entirely`, "other"},
		{``, "other"},
	} {
		if got := ClassifyDLQ(c.msg).String(); got != c.want {
			t.Errorf("ClassifyDLQ(%q) = %s, want %s", c.msg, got, c.want)
		}
	}
}

func TestDLQReasonString(t *testing.T) {
	want := []string{"other", "decode", "key", "time", "id", "size", "rule", "unknown_stream", "skew"}
	for i, w := range want {
		if got := DLQReason(i).String(); got != w {
			t.Errorf("DLQReason(%d) = %q, want %q", i, got, w)
		}
	}
	if got := DLQReason(200).String(); got != "other" {
		t.Errorf("DLQReason(200) = %q, want other", got)
	}
}
