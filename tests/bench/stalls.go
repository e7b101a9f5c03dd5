package main

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

// The machine's stalls: how often this machine stops a thread that has
// work. A latency figure of a few hundred microseconds at p99 can be no
// better than the machine lets a busy thread run: on a virtual machine
// the hypervisor takes a vCPU away now and then, and with it the thread
// running there (and the goroutines queued on that thread's processor).
// The harness measures it once, on a quiet machine, before the floors:
// one thread per processor (GOMAXPROCS), each locked to its OS thread,
// reads the clock in a loop, and a gap between two readings longer than
// stallMin is a time the thread did not run.

// stallMin is the shortest gap counted as a stall: reading the clock
// takes some 60 ns, so a gap of 100 µs is the thread not running.
const stallMin = 100 * time.Microsecond

// stallReport is what the threads of one measurement saw.
type stallReport struct {
	busy time.Duration   // the threads' time in all (threads × duration)
	gaps []time.Duration // every gap of stallMin or longer, sorted
}

// measureStalls runs threads busy threads for d and returns their gaps.
func measureStalls(threads int, d time.Duration) stallReport {
	var mu sync.Mutex
	var wg sync.WaitGroup
	r := stallReport{busy: time.Duration(threads) * d}
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			gaps := stallGaps(time.Now, d, stallMin)
			mu.Lock()
			r.gaps = append(r.gaps, gaps...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(r.gaps)
	return r
}

// stallGaps reads now in a loop until d has passed since its first
// reading and returns each gap between two readings that lasts least or
// longer.
func stallGaps(now func() time.Time, d, least time.Duration) []time.Duration {
	var gaps []time.Duration
	start := now()
	last := start
	for {
		t := now()
		if g := t.Sub(last); g >= least {
			gaps = append(gaps, g)
		}
		if t.Sub(start) >= d {
			return gaps
		}
		last = t
	}
}

// perSecond is the number of gaps that last least or longer per second
// of busy thread.
func (r stallReport) perSecond(least time.Duration) float64 {
	n := len(r.gaps) - sortedIndex(r.gaps, least)
	return float64(n) / r.busy.Seconds()
}

// lostFraction is the share of the busy time spent in gaps.
func (r stallReport) lostFraction() float64 {
	var lost time.Duration
	for _, g := range r.gaps {
		lost += g
	}
	return float64(lost) / float64(r.busy)
}

// longest is the longest gap, 0 if none.
func (r stallReport) longest() time.Duration {
	if len(r.gaps) == 0 {
		return 0
	}
	return r.gaps[len(r.gaps)-1]
}

// sortedIndex is the index of the first gap that lasts least or longer in
// sorted gaps.
func sortedIndex(gaps []time.Duration, least time.Duration) int {
	i, _ := slices.BinarySearch(gaps, least)
	return i
}

// addStalls measures the machine's stalls (GOMAXPROCS threads for one
// second) and adds its rows.
func addStalls(res *results) {
	r := measureStalls(runtime.GOMAXPROCS(0), time.Second)
	res.add("machine", "stalls_per_cpu_s_over_500us", r.perSecond(500*time.Microsecond), "stalls/s")
	res.add("machine", "stalls_per_cpu_s_over_1ms", r.perSecond(time.Millisecond), "stalls/s")
	res.add("machine", "stalled_fraction", r.lostFraction(), "x")
	res.add("machine", "longest_stall_us", float64(r.longest().Microseconds()), "us")
}
