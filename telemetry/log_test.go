package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.With("component", "kafka").Warn("paused", "task", 3)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %v\n%s", err, buf.String())
	}
	if rec["msg"] != "paused" || rec["level"] != "WARN" || rec["component"] != "kafka" || rec["task"] != 3.0 {
		t.Errorf("record %v", rec)
	}

	buf.Reset()
	log, err = NewLogger(&buf, "", "")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("started", "addr", ":8080")
	if got := buf.String(); !strings.HasPrefix(got, "time=") || !strings.Contains(got, `level=INFO msg=started addr=:8080`) {
		t.Errorf("text record %q", got)
	}
}

func TestNewLoggerTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "json", "DEBUG")
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex(parentID)
	ctx := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	log.WithGroup("g").DebugContext(ctx, "decided")
	log.Debug("no span")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records: %q", len(lines), lines)
	}
	if !strings.Contains(lines[0], `"trace_id":"`+traceID+`"`) || !strings.Contains(lines[0], `"span_id":"`+parentID+`"`) {
		t.Errorf("record with a span lacks its IDs: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("record without a span has a trace ID: %s", lines[1])
	}
}

func TestNewLoggerErrors(t *testing.T) {
	for _, c := range []struct{ format, level, want string }{
		{"xml", "info", `log format "xml": want text or json`},
		{"json", "loud", `log level "loud": want debug, info, warn or error`},
	} {
		_, err := NewLogger(&bytes.Buffer{}, c.format, c.level)
		if err == nil || err.Error() != c.want {
			t.Errorf("NewLogger(%q, %q) = %v, want %q", c.format, c.level, err, c.want)
		}
	}
}
