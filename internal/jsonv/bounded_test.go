package jsonv

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeBounded(t *testing.T) {
	long := `"` + strings.Repeat("x", 20) + `"` // 22 bytes of text
	obj := `{"a":` + long + `,"b":[1,2,3,4,5,6,7,8,9,10],"c":"ok","skip":` + long + `}`
	tests := []struct {
		name    string
		decode  func() error
		wantKey string // "" when the decode succeeds
	}{
		{"slots: a long kept string", func() error {
			_, _, err := DecodeSlotsBounded(obj, []string{"a", "c"}, make([]any, 2), 21)
			return err
		}, "a"},
		{"slots: a long kept list", func() error {
			_, _, err := DecodeSlotsBounded(obj, []string{"b"}, make([]any, 1), 20)
			return err
		}, "b"},
		{"slots: long members not kept are not bounded", func() error {
			_, _, err := DecodeSlotsBounded(obj, []string{"c"}, make([]any, 1), 4)
			return err
		}, ""},
		{"slots: exactly at the limit", func() error {
			_, _, err := DecodeSlotsBounded(obj, []string{"a", "b"}, make([]any, 2), 22)
			return err
		}, ""},
		{"only: kept members", func() error {
			_, err := DecodeOnlyBounded(obj, []string{"skip"}, nil, 21)
			return err
		}, "skip"},
		{"whole: the bounded names", func() error {
			_, err := DecodeOnlyBounded(obj, nil, []string{"c", "b"}, 10)
			return err
		}, "b"},
		{"whole: others unbounded", func() error {
			_, err := DecodeOnlyBounded(obj, nil, []string{"c"}, 10)
			return err
		}, ""},
		{"nested members are the member's text", func() error {
			_, err := DecodeOnlyBounded(`{"n":{"a":`+long+`}}`, nil, []string{"a"}, 10)
			return err
		}, ""},
	}
	for _, tt := range tests {
		err := tt.decode()
		var tl *MemberTooLongError
		switch {
		case tt.wantKey == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.wantKey != "" && (!errors.As(err, &tl) || tl.Key != tt.wantKey):
			t.Errorf("%s: got %v, want field %q too long", tt.name, err, tt.wantKey)
		}
	}
	// The decoder is pooled: a refused decode leaves it clean for the next.
	if v, err := Decode(obj); err != nil || len(v.(map[string]any)) != 4 {
		t.Fatalf("after a refused decode: %v, %v", v, err)
	}
}
