package main

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// highestSustained steps up by half, then halves the gap to within 5% of the limit.
func TestHighestSustained(t *testing.T) {
	for _, tt := range []struct {
		name     string
		start    int
		limit    int // the highest rate kept
		want     int
		wantRuns []int
	}{
		{"between two steps", 8000, 10900, 10500, []int{8000, 12000, 10000, 11000, 10500}},
		{"on a step", 8000, 12000, 12000, []int{8000, 12000, 18000, 15000, 13500, 12750, 12375}},
		{"below the start", 8000, 5000, 5000, []int{8000, 4000, 6000, 5000, 5500, 5250}},
		{"from 1/s", 1, 3, 3, []int{1, 2, 3, 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var runs []int
			got, err := highestSustained(context.Background(), tt.start, func(r int) (bool, error) {
				runs = append(runs, r)
				return r <= tt.limit, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !slices.Equal(runs, tt.wantRuns) {
				t.Errorf("highestSustained = %d after %v, want %d after %v", got, runs, tt.want, tt.wantRuns)
			}
		})
	}
	boom := errors.New("the service went away")
	if _, err := highestSustained(context.Background(), 8000, func(r int) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("a run's error: got %v", err)
	}
}
