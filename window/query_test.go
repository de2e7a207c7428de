package window

import "testing"

func TestLive(t *testing.T) {
	op, err := New(Spec{Kind: Tumbling, Size: 10}, []Aggregate{{Name: "n", Kind: Count}, {Name: "s", Kind: Sum}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{1, 2, 15} {
		op.Add("k", ts, []any{nil, 2.0}, 0, func(Result) {})
	}
	var got []Result
	op.Live("k", func(r Result) { got = append(got, r) })
	if len(got) != 2 || got[0].Start != 0 || got[0].Values[0] != int64(2) || got[0].Values[1] != 4.0 ||
		got[1].Start != 10 || got[1].Values[0] != int64(1) {
		t.Fatalf("Live = %+v", got)
	}
	op.Live("other", func(Result) { t.Fatal("a key with no windows has none") })
}
