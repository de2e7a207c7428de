package join

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the scripts in testdata. Commands:
//
//	define lower=D upper=D [lower-exclusive=B] [upper-exclusive=B] [where=eq]
//	add key=K side=left|right t=T [wm=W] [v=V]
//	advance wm=W
//	len
//	state
//
// D, T and W are milliseconds or min/max (math.MinInt64/MaxInt64); wm
// defaults to the last one given (min at first). where=eq joins only
// elements with equal values. Elements get Seq 1, 2, ... in the order of
// the add commands and print as T#Seq, with :V when they have a value. add
// prints the pairs it emitted, then "ok" or "late"; advance prints the
// number of buffered elements; state prints each key's buffers.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var h harness
		datadriven.RunTest(t, path, h.run)
	})
}

type harness struct {
	op  *Operator
	wm  int64
	seq uint64
}

func (h *harness) run(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "define":
		return h.define(t, td)
	case "add":
		var out strings.Builder
		key := stringArg(t, td, "key")
		var side Side
		switch s := stringArg(t, td, "side"); s {
		case "left":
			side = Left
		case "right":
			side = Right
		default:
			t.Fatalf("%s: unknown side %q", td.Pos, s)
		}
		if td.HasArg("wm") {
			h.wm = timeArg(t, td, "wm")
		}
		h.seq++
		el := &Element{Time: timeArg(t, td, "t"), Seq: h.seq}
		if td.HasArg("v") {
			el.Value = stringArg(t, td, "v")
		}
		ok := h.op.Add(key, side, el, h.wm, func(p Pair) {
			fmt.Fprintf(&out, "pair %s t=%s left=%s right=%s\n", key, fmtTime(p.Time), fmtElem(p.Left), fmtElem(p.Right))
		})
		if ok {
			out.WriteString("ok\n")
		} else {
			out.WriteString("late\n")
		}
		return out.String()
	case "advance":
		h.wm = timeArg(t, td, "wm")
		h.op.Advance(h.wm)
		return fmt.Sprintf("len=%d\n", h.op.Len())
	case "len":
		return fmt.Sprintf("len=%d\n", h.op.Len())
	case "state":
		return h.state()
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return ""
}

func (h *harness) define(t *testing.T, td *datadriven.TestData) string {
	spec := Spec{Lower: timeArg(t, td, "lower"), Upper: timeArg(t, td, "upper")}
	if td.HasArg("lower-exclusive") {
		td.ScanArgs(t, "lower-exclusive", &spec.LowerExclusive)
	}
	if td.HasArg("upper-exclusive") {
		td.ScanArgs(t, "upper-exclusive", &spec.UpperExclusive)
	}
	var cond Condition
	if td.HasArg("where") {
		if w := stringArg(t, td, "where"); w != "eq" {
			t.Fatalf("%s: unknown condition %q", td.Pos, w)
		}
		cond = func(l, r *Element) bool { return l.Value == r.Value }
	}
	h.wm, h.seq = math.MinInt64, 0
	op, err := New(spec, cond)
	if err != nil {
		h.op = nil
		return err.Error() + "\n"
	}
	h.op = op
	return "ok\n"
}

func (h *harness) state() string {
	var b strings.Builder
	keys := make([]string, 0, len(h.op.keys))
	for k := range h.op.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ks := h.op.keys[k]
		for _, side := range []Side{Left, Right} {
			buf := &ks.sides[side]
			fmt.Fprintf(&b, "%s %s:", k, side)
			for _, el := range buf.elems[buf.head:] {
				b.WriteString(" " + fmtElem(el))
			}
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "len=%d\n", h.op.Len())
	return b.String()
}

func fmtElem(el *Element) string {
	s := fmtTime(el.Time) + "#" + strconv.FormatUint(el.Seq, 10)
	if el.Value != nil {
		s += ":" + fmt.Sprint(el.Value)
	}
	return s
}

func fmtTime(ms int64) string {
	switch ms {
	case math.MinInt64:
		return "min"
	case math.MaxInt64:
		return "max"
	}
	return strconv.FormatInt(ms, 10)
}

func stringArg(t *testing.T, td *datadriven.TestData, name string) string {
	t.Helper()
	var s string
	td.ScanArgs(t, name, &s)
	return s
}

func timeArg(t *testing.T, td *datadriven.TestData, name string) int64 {
	t.Helper()
	switch s := stringArg(t, td, name); s {
	case "min":
		return math.MinInt64
	case "max":
		return math.MaxInt64
	default:
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", td.Pos, name, s, err)
		}
		return v
	}
}
