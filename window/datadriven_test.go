package window

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the scripts in testdata. Commands:
//
//	define kind=tumbling|sliding|session [size=D] [slide=D] [offset=D] [gap=D]
//	       [lateness=D] [aggs=count,sum,...|name:kind,...] [timefmt=rfc3339]
//	add key=K t=T [wm=W] [arg=V | args=(V, V, ...)]
//	advance wm=W
//	state
//
// D is milliseconds or a Go duration ("24h", "-8h"); T and W are
// milliseconds, RFC 3339 times, or min/max (math.MinInt64/MaxInt64); wm
// defaults to the last one given. V is nil, true, false, an integer
// (int64), a number with a '.' or exponent (float64), or else a string;
// arg gives every aggregate the same argument. add prints the results it
// fired, then "ok" or "late"; advance prints the results and the number of
// live windows; state prints the live windows per key.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var h harness
		datadriven.RunTest(t, path, h.run)
	})
}

type harness struct {
	op      *Operator
	aggs    []Aggregate
	wm      int64
	rfc3339 bool
}

func (h *harness) run(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "define":
		return h.define(t, td)
	case "add":
		var out strings.Builder
		key := stringArg(t, td, "key")
		ts := timeArg(t, td, "t")
		if td.HasArg("wm") {
			h.wm = timeArg(t, td, "wm")
		}
		var args []any
		if a, ok := td.Arg("arg"); ok {
			v := parseValue(a.SingleVal(t))
			for range h.aggs {
				args = append(args, v)
			}
		}
		if a, ok := td.Arg("args"); ok {
			for _, s := range a.Vals {
				args = append(args, parseValue(strings.TrimSpace(s)))
			}
		}
		ok := h.op.Add(key, ts, args, h.wm, h.emitTo(&out))
		if ok {
			out.WriteString("ok\n")
		} else {
			out.WriteString("late\n")
		}
		return out.String()
	case "advance":
		var out strings.Builder
		h.wm = timeArg(t, td, "wm")
		h.op.Advance(h.wm, h.emitTo(&out))
		fmt.Fprintf(&out, "len=%d\n", h.op.Len())
		return out.String()
	case "state":
		return h.state()
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return ""
}

func (h *harness) define(t *testing.T, td *datadriven.TestData) string {
	var spec Spec
	switch k := stringArg(t, td, "kind"); k {
	case "tumbling":
		spec.Kind = Tumbling
	case "sliding":
		spec.Kind = Sliding
	case "session":
		spec.Kind = Session
	default:
		t.Fatalf("%s: unknown kind %q", td.Pos, k)
	}
	for name, dst := range map[string]*int64{
		"size": &spec.Size, "slide": &spec.Slide, "offset": &spec.Offset,
		"gap": &spec.Gap, "lateness": &spec.AllowedLateness,
	} {
		if td.HasArg(name) {
			*dst = durationArg(t, td, name)
		}
	}
	h.aggs = nil
	if a, ok := td.Arg("aggs"); ok {
		for _, v := range a.Vals {
			for _, s := range strings.Split(v, ",") {
				name, kind, found := strings.Cut(strings.TrimSpace(s), ":")
				if !found {
					kind = name
				}
				k, ok := ParseAggKind(kind)
				if !ok {
					t.Fatalf("%s: unknown aggregate %q", td.Pos, kind)
				}
				h.aggs = append(h.aggs, Aggregate{Name: name, Kind: k})
			}
		}
	}
	h.rfc3339 = td.HasArg("timefmt") && stringArg(t, td, "timefmt") == "rfc3339"
	h.wm = math.MinInt64
	op, err := New(spec, h.aggs)
	if err != nil {
		return err.Error() + "\n"
	}
	h.op = op
	return "ok\n"
}

func (h *harness) emitTo(out *strings.Builder) func(Result) {
	return func(r Result) { out.WriteString(h.formatResult(r) + "\n") }
}

func (h *harness) formatResult(r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fire %s [%s,%s)", r.Key, h.formatTime(r.Start), h.formatTime(r.End))
	for i, v := range r.Values {
		fmt.Fprintf(&b, " %s=%s", h.aggs[i].Name, formatValue(v))
	}
	if r.Update {
		b.WriteString(" update")
	}
	return b.String()
}

func (h *harness) state() string {
	var b strings.Builder
	keys := slices.Sorted(h.op.Keys)
	for _, k := range keys {
		for _, w := range h.op.keys.get(k).wins {
			fmt.Fprintf(&b, "%s [%s,%s) count=%d", k, h.formatTime(w.start), h.formatTime(w.end), w.count)
			if w.fired {
				b.WriteString(" fired")
			}
			if w.armed {
				b.WriteString(" armed")
			}
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "len=%d\n", h.op.Len())
	return b.String()
}

func (h *harness) formatTime(ms int64) string {
	switch {
	case ms == math.MinInt64:
		return "min"
	case ms == math.MaxInt64:
		return "max"
	case h.rfc3339:
		return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	}
	return strconv.FormatInt(ms, 10)
}

func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

func parseValue(s string) any {
	switch s {
	case "nil":
		return nil
	case "true":
		return true
	case "false":
		return false
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	if strings.ContainsAny(s, ".eE") {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
	}
	return s
}

func stringArg(t *testing.T, td *datadriven.TestData, key string) string {
	a, ok := td.Arg(key)
	if !ok {
		t.Fatalf("%s: missing %s=", td.Pos, key)
	}
	return a.SingleVal(t)
}

func timeArg(t *testing.T, td *datadriven.TestData, key string) int64 {
	s := stringArg(t, td, key)
	switch s {
	case "min":
		return math.MinInt64
	case "max":
		return math.MaxInt64
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s: %s=%s: not milliseconds, min, max or RFC 3339", td.Pos, key, s)
	}
	return ts.UnixMilli()
}

func durationArg(t *testing.T, td *datadriven.TestData, key string) int64 {
	s := stringArg(t, td, key)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %s=%s: not milliseconds or a duration", td.Pos, key, s)
	}
	return d.Milliseconds()
}
