package actorlb

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noMemoryLimit lifts the process's memory limit (GOMEMLIMIT) for the
// test.
func noMemoryLimit(t *testing.T) {
	t.Helper()
	old := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

// withGCPercent sets the collector's percent for the test and puts the
// process's back after it.
func withGCPercent(t *testing.T, p int) {
	t.Helper()
	old := debug.SetGCPercent(p)
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

func heapGoal(t *testing.T) uint64 {
	t.Helper()
	goal, ok := readMetric("/gc/heap/goal:bytes")
	require.True(t, ok, "the runtime reports its heap goal")
	return goal
}

func TestRestoreHeadroomRaisesTheHeapGoalUntilPutBack(t *testing.T) {
	noMemoryLimit(t)
	withGCPercent(t, 100)
	before := heapGoal(t)
	putBack := raiseHeapGoal(Config{})
	assert.Greater(t, readGCPercent(), 100, "percent while held")
	assert.GreaterOrEqual(t, heapGoal(t), before+RestoreHeadroom, "the goal is raised by the headroom at least")
	putBack()
	assert.Equal(t, 100, readGCPercent(), "put back")
	putBack()
	assert.Equal(t, 100, readGCPercent(), "a second put back changes nothing")
}

func TestRestoreHeadroomIsTakenOnlyWhenARestoreCanUseIt(t *testing.T) {
	noMemoryLimit(t)
	withGCPercent(t, 100)
	for _, c := range []struct {
		name  string
		cfg   Config
		raise bool
	}{
		{"default", Config{}, true},
		{"turned off", Config{NoRestoreHeadroom: true}, false},
		{"nothing restored", Config{NoRestore: true}, false},
		{"in-memory maps", Config{InMemory: true}, false},
	} {
		putBack := raiseHeapGoal(c.cfg)
		assert.Equal(t, c.raise, readGCPercent() > 100, c.name)
		putBack()
		assert.Equal(t, 100, readGCPercent(), c.name+": put back")
	}
}

func TestRestoreHeadroomIsNotTakenUnderAMemoryLimit(t *testing.T) {
	noMemoryLimit(t)
	withGCPercent(t, 100)
	debug.SetMemoryLimit(1 << 40)
	putBack := raiseHeapGoal(Config{})
	assert.Equal(t, 100, readGCPercent(), "under a limit")
	putBack()
	debug.SetMemoryLimit(math.MaxInt64)
	putBack = raiseHeapGoal(Config{})
	assert.Greater(t, readGCPercent(), 100, "no limit again")
	putBack()
}

func TestRestoreHeadroomLeavesACollectorTurnedOffAlone(t *testing.T) {
	noMemoryLimit(t)
	withGCPercent(t, -1)
	putBack := raiseHeapGoal(Config{})
	assert.Equal(t, -1, readGCPercent(), "while held")
	putBack()
	assert.Equal(t, -1, readGCPercent(), "after")
}

func TestEnginesRestoringTogetherShareOneRaiseAndTheLastPutsItBack(t *testing.T) {
	noMemoryLimit(t)
	withGCPercent(t, 100)
	first := raiseHeapGoal(Config{})
	raised := readGCPercent()
	second := raiseHeapGoal(Config{})
	assert.Equal(t, raised, readGCPercent(), "the second holder keeps the first's percent")
	first()
	assert.Equal(t, raised, readGCPercent(), "one holder is left")
	second()
	assert.Equal(t, 100, readGCPercent(), "the last holder puts the percent back")
}

func TestRestoreHeadroomKeepsAPercentSetWhileItWasHeld(t *testing.T) {
	noMemoryLimit(t)
	withGCPercent(t, 100)
	putBack := raiseHeapGoal(Config{})
	debug.SetGCPercent(250)
	putBack()
	assert.Equal(t, 250, readGCPercent(), "the percent set meanwhile stays")
}

func TestHeadroomPercentGivesTheGoalOfTheHeadroomMoreLive(t *testing.T) {
	for _, c := range []struct {
		name string
		old  int
		live uint64
		want int
	}{
		// (live + 64 MiB) × (1 + old/100) = live × (1 + p/100)
		{"no cycle yet: the runtime's least goal of 4 MiB", 100, 0, 3300},
		{"64 MiB live", 100, 64 << 20, 300},
		{"1 GiB live barely changes", 100, 1 << 30, 113},
		{"GOGC=50, 64 MiB live", 50, 64 << 20, 200},
		{"GOGC=0: the headroom alone", 0, 64 << 20, 100},
	} {
		assert.Equal(t, c.want, headroomPercent(c.old, c.live), c.name)
	}
}

// New asks for huge pages for the restore's heap only when there is a
// restore, it is not turned off, and the process has no memory limit;
// whether the kernel and the heap allow it is hugepages' to say (its
// tests), and when they do not it says why.
func TestRestoreHugePagesAreAskedOnlyWhenARestoreCanUseThem(t *testing.T) {
	noMemoryLimit(t)
	log := logrus.NewEntry(logrus.New())
	for _, c := range []struct {
		name string
		cfg  Config
		try  bool
	}{
		{"default", Config{}, true},
		{"turned off", Config{NoRestoreHugePages: true}, false},
		{"nothing restored", Config{NoRestore: true}, false},
		{"in-memory maps", Config{InMemory: true}, false},
	} {
		r, tried := prepareHeapPages(c.cfg, log)
		assert.Equal(t, c.try, tried, c.name)
		if tried {
			assert.True(t, (r.Advised > 0) != (r.Skipped != ""), "%s: advised %d bytes or says why not (%q)", c.name, r.Advised, r.Skipped)
		} else {
			assert.Zero(t, r.Advised, c.name)
		}
	}
	old := debug.SetMemoryLimit(1 << 40)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	_, tried := prepareHeapPages(Config{}, log)
	assert.False(t, tried, "under a memory limit")
}
