package main

import (
	"testing"
	"time"
)

// clock returns a now that gives t0 plus each step in turn, then keeps
// adding the last one.
func clock(t0 time.Time, steps ...time.Duration) func() time.Time {
	t, i := t0, 0
	return func() time.Time {
		cur := t
		d := steps[len(steps)-1]
		if i < len(steps) {
			d = steps[i]
			i++
		}
		t = t.Add(d)
		return cur
	}
}

func TestStallGapsCountsEachGapOfAtLeastMinUntilTheDurationHasPassed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	us := time.Microsecond
	// Readings 1 µs apart, with gaps of 150, 99 and 2,000 µs among them,
	// over 3 ms.
	now := clock(t0, us, 150*us, us, 99*us, us, 2000*us, us)
	gaps := stallGaps(now, 3*time.Millisecond, 100*us)
	want := []time.Duration{150 * us, 2000 * us}
	if len(gaps) != len(want) {
		t.Fatalf("gaps = %v, want %v", gaps, want)
	}
	for i := range want {
		if gaps[i] != want[i] {
			t.Fatalf("gaps = %v, want %v", gaps, want)
		}
	}
}

func TestStallReportRatesAndFractionReadItsGaps(t *testing.T) {
	us := time.Microsecond
	r := stallReport{busy: 2 * time.Second, gaps: []time.Duration{100 * us, 400 * us, 500 * us, 1000 * us, 3000 * us}}
	if got := r.perSecond(500 * us); got != 1.5 {
		t.Errorf("perSecond(500 µs) = %v, want 1.5 (3 gaps in 2 s)", got)
	}
	if got := r.perSecond(time.Millisecond); got != 1 {
		t.Errorf("perSecond(1 ms) = %v, want 1", got)
	}
	if got, want := r.lostFraction(), 5000e-6/2; got != want {
		t.Errorf("lostFraction = %v, want %v", got, want)
	}
	if got := r.longest(); got != 3000*us {
		t.Errorf("longest = %v, want 3 ms", got)
	}
	if got := (stallReport{busy: time.Second}).longest(); got != 0 {
		t.Errorf("longest of no gaps = %v, want 0", got)
	}
}

func TestMeasureStallsRunsEveryThreadForTheDuration(t *testing.T) {
	start := time.Now()
	r := measureStalls(2, 20*time.Millisecond)
	if r.busy != 40*time.Millisecond {
		t.Errorf("busy = %v, want 40ms", r.busy)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("measureStalls returned after %v, before its duration", took)
	}
	for i := 1; i < len(r.gaps); i++ {
		if r.gaps[i] < r.gaps[i-1] {
			t.Fatalf("gaps not sorted: %v", r.gaps)
		}
	}
	for _, g := range r.gaps {
		if g < stallMin {
			t.Fatalf("gap %v shorter than stallMin", g)
		}
	}
}
