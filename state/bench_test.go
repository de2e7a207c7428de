package state

import (
	"bytes"
	"fmt"
	"testing"
)

// bigSnapshot is a 10 MB snapshot shaped like a busy task's: a large
// history, smaller windows and dedup sections, and a few offsets.
func bigSnapshot(seq uint64) *Snapshot {
	return &Snapshot{
		Task: 0,
		Seq:  seq,
		Offsets: map[string]int64{
			"payments/0": 123456789, "logins/0": 98765, "vigil.decisions/0": 4567,
		},
		Sections: map[string][]byte{
			"history": bytes.Repeat([]byte("h"), 7<<20),
			"windows": bytes.Repeat([]byte("w"), 2<<20),
			"dedup":   bytes.Repeat([]byte("d"), 1<<20),
		},
	}
}

func BenchmarkSave(b *testing.B) {
	d, err := OpenDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	s := bigSnapshot(0)
	b.SetBytes(int64(len(Encode(s))))
	b.ReportAllocs()
	for b.Loop() {
		s.Seq++
		if err := d.Save(b.Context(), s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSaveDelta saves small deltas on a big base, a new base every
// 100 saves, so that pruning sees long chains.
func BenchmarkSaveDelta(b *testing.B) {
	d, err := OpenDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	base := bigSnapshot(1)
	if err := d.Save(b.Context(), base); err != nil {
		b.Fatal(err)
	}
	s := &Snapshot{Seq: 1, Offsets: base.Offsets, Sections: map[string][]byte{"history": bytes.Repeat([]byte("h"), 4<<10)}}
	b.SetBytes(int64(len(Encode(s))))
	b.ReportAllocs()
	for b.Loop() {
		s.Parent, s.Seq = s.Seq, s.Seq+1
		if s.Seq%100 == 0 {
			s.Parent = 0
		}
		if err := d.Save(b.Context(), s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChain restores a big base and 10 small deltas.
func BenchmarkChain(b *testing.B) {
	d, err := OpenDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	s := bigSnapshot(1)
	if err := d.Save(b.Context(), s); err != nil {
		b.Fatal(err)
	}
	size := len(Encode(s))
	for seq := uint64(2); seq <= 11; seq++ {
		ds := &Snapshot{Seq: seq, Parent: seq - 1, Offsets: s.Offsets, Sections: map[string][]byte{"history": bytes.Repeat([]byte("h"), 4<<10)}}
		if err := d.Save(b.Context(), ds); err != nil {
			b.Fatal(err)
		}
		size += len(Encode(ds))
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		c, err := d.Chain(b.Context(), 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(c) != 11 {
			b.Fatalf("chain of %d snapshots, want 11", len(c))
		}
	}
}

func BenchmarkEncodeDecode(b *testing.B) {
	s := bigSnapshot(1)
	enc := Encode(s)
	for _, bc := range []struct {
		name string
		f    func() error
	}{
		{"Encode", func() error { Encode(s); return nil }},
		{"Decode", func() error { _, err := Decode(enc); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.f(); err != nil {
					b.Fatal(fmt.Errorf("%s: %w", bc.name, err))
				}
			}
		})
	}
}
