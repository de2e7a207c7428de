package codec

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	vals := []any{
		nil, true, false, 0.0, -1.5, math.Inf(1), int64(-7), "", "héllo",
		[]any{}, []any{1.0, "x", nil, []any{true}},
		map[string]any{}, map[string]any{"b": 2.0, "a": map[string]any{"c": []any{"d"}}},
	}
	var e Encoder
	e.Uvarint(300)
	e.Varint(math.MinInt64)
	e.Int(5)
	e.Bool(true)
	e.Float64(math.Copysign(0, -1))
	e.String("s")
	e.ByteSlice(nil)
	e.ByteSlice([]byte{})
	e.ByteSlice([]byte("xy"))
	for _, v := range vals {
		if err := e.Value(v); err != nil {
			t.Fatal(err)
		}
	}
	d := NewDecoder(e.Bytes())
	if got := d.Uvarint(); got != 300 {
		t.Errorf("Uvarint = %d", got)
	}
	if got := d.Varint(); got != math.MinInt64 {
		t.Errorf("Varint = %d", got)
	}
	if got := d.Int(); got != 5 {
		t.Errorf("Int = %d", got)
	}
	if !d.Bool() {
		t.Error("Bool = false")
	}
	if f := d.Float64(); f != 0 || !math.Signbit(f) {
		t.Errorf("Float64 = %v, want -0", f)
	}
	if s := d.String(); s != "s" {
		t.Errorf("String = %q", s)
	}
	if b := d.ByteSlice(); b != nil {
		t.Errorf("ByteSlice = %v, want nil", b)
	}
	if b := d.ByteSlice(); b == nil || len(b) != 0 {
		t.Errorf("ByteSlice = %v, want empty", b)
	}
	if b := d.ByteSlice(); string(b) != "xy" {
		t.Errorf("ByteSlice = %q", b)
	}
	for _, want := range vals {
		got := d.Value()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Value mismatch (-want +got):\n%s", diff)
		}
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestDeterministicObjects(t *testing.T) {
	m := map[string]any{}
	for i := range 50 {
		m[string(rune('a'+i%26))+string(rune('0'+i/26))] = float64(i)
	}
	var a, b Encoder
	_ = a.Value(m)
	_ = b.Value(m)
	if string(a.Bytes()) != string(b.Bytes()) {
		t.Fatal("the same map encodes to different bytes")
	}
}

func TestUnknownType(t *testing.T) {
	var e Encoder
	if err := e.Value(struct{}{}); err == nil {
		t.Fatal("no error for an unknown type")
	}
}

func TestCorrupt(t *testing.T) {
	for name, b := range map[string][]byte{
		"truncated string": {tagString, 5, 'a'},
		"huge count":       {tagArray, 0xff, 0xff, 0xff, 0x7f},
		"unknown tag":      {99},
		"non-canonical":    {tagInt, 0x80, 0x00},
		"duplicate key":    {tagObject, 2, 1, 'a', tagNull, 1, 'a', tagNull},
	} {
		d := NewDecoder(b)
		d.Value()
		if err := d.Finish(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
		d = NewDecoder(b)
		d.SkipValue()
		if err := d.Finish(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: SkipValue: err = %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzDecodeValue: what Value accepts encodes back to the same bytes, and
// SkipValue accepts exactly that.
func FuzzDecodeValue(f *testing.F) {
	var e Encoder
	_ = e.Value(map[string]any{"a": []any{1.0, "x", int64(3), nil, true}})
	f.Add(e.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		v := d.Value()
		// SkipValue accepts what Value accepts, and reads as far.
		skip := NewDecoder(b)
		skip.SkipValue()
		if (skip.Err() == nil) != (d.Err() == nil) || d.Err() == nil && skip.Len() != d.Len() {
			t.Fatalf("SkipValue: err %v, %d bytes left; Value: err %v, %d left", skip.Err(), skip.Len(), d.Err(), d.Len())
		}
		if d.Err() != nil {
			return
		}
		var e Encoder
		if err := e.Value(v); err != nil {
			t.Fatal(err)
		}
		if got := e.Bytes(); string(got) != string(b[:len(b)-d.Len()]) {
			t.Fatalf("re-encoding differs: %x vs %x", got, b[:len(b)-d.Len()])
		}
	})
}

// TestUvarintLen: the computed length is AppendUvarint's, at every length
// boundary, and VarintLen for Varint's zigzag mapping too.
func TestUvarintLen(t *testing.T) {
	for shift := range 64 {
		for _, u := range []uint64{1<<shift - 1, 1 << shift, 1<<shift + 1} {
			if got, want := UvarintLen(u), len(binary.AppendUvarint(nil, u)); got != want {
				t.Errorf("UvarintLen(%d) = %d, want %d", u, got, want)
			}
			v := int64(u)
			if got, want := VarintLen(v), len(binary.AppendVarint(nil, v)); got != want {
				t.Errorf("VarintLen(%d) = %d, want %d", v, got, want)
			}
		}
	}
}
