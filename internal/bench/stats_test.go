package bench

import (
	"math"
	"testing"
	"time"
)

func seq(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(i + 1)
	}
	return s
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{name: "empty", sorted: nil, p: 50, want: 0},
		{name: "one sample is every percentile", sorted: []float64{7}, p: 99, want: 7},
		{name: "p50 of 1..10", sorted: seq(10), p: 50, want: 5},
		{name: "p90 of 1..10", sorted: seq(10), p: 90, want: 9},
		{name: "p99 of 1..10 is the maximum", sorted: seq(10), p: 99, want: 10},
		{name: "p50 of 1..9 is the middle", sorted: seq(9), p: 50, want: 5},
		{name: "p99 of 1..100", sorted: seq(100), p: 99, want: 99},
		{name: "p99 of 1..200", sorted: seq(200), p: 99, want: 198},
		{name: "p100 is the maximum", sorted: seq(200), p: 100, want: 200},
		{name: "a tiny p is the minimum", sorted: seq(200), p: 0.1, want: 1},
		{name: "p0 clamps to the minimum", sorted: seq(5), p: 0, want: 1},
		{name: "p50 of two is the lower", sorted: []float64{1, 2}, p: 50, want: 1},
		{name: "p51 of two is the upper", sorted: []float64{1, 2}, p: 51, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %g) = %g, want %g", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	in := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6} // unsorted on purpose
	got := Summarize(in)
	want := Stats{N: 10, Min: 1, P50: 5, P90: 9, P99: 10, Max: 10, Mean: 5.5}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if in[0] != 5 {
		t.Errorf("Summarize sorted its input in place: %v", in)
	}
	if got := Summarize(nil); got != (Stats{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", got)
	}
}

func TestSummarizeDurationsIsMilliseconds(t *testing.T) {
	got := SummarizeDurations([]time.Duration{1500 * time.Microsecond, 500 * time.Microsecond, 2 * time.Millisecond})
	if got.N != 3 || got.Min != 0.5 || got.P50 != 1.5 || got.Max != 2 {
		t.Errorf("SummarizeDurations = %+v, want n=3 min=0.5 p50=1.5 max=2 (ms)", got)
	}
	if math.Abs(got.Mean-4.0/3) > 1e-9 {
		t.Errorf("mean = %g, want %g", got.Mean, 4.0/3)
	}
}
