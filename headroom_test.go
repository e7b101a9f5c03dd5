package actorlb

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
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

// restoreStepCase is a Config and whether a step New takes for the
// restore's heap (the headroom, the huge pages, the collection) runs
// under it.
type restoreStepCase struct {
	name string
	cfg  Config
	runs bool
}

// restoreStepCases are the Configs each such step is checked under: the
// default (it runs), off (the step's own switch turned on), and the two
// with nothing to restore.
func restoreStepCases(off Config) []restoreStepCase {
	return []restoreStepCase{
		{"default", Config{}, true},
		{"turned off", off, false},
		{"nothing restored", Config{NoRestore: true}, false},
		{"in-memory maps", Config{InMemory: true}, false},
	}
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
	for _, c := range restoreStepCases(Config{NoRestoreHeadroom: true}) {
		putBack := raiseHeapGoal(c.cfg)
		assert.Equal(t, c.runs, readGCPercent() > 100, c.name)
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
	for _, c := range restoreStepCases(Config{NoRestoreHugePages: true}) {
		r, tried := prepareHeapPages(c.cfg, log)
		assert.Equal(t, c.runs, tried, c.name)
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

func TestCollectionBeforeRestoreRunsOnlyOnAHeapWorthCollectingAndCheapToMark(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name          string
		objects, live uint64
		gogc          int
		runs          bool
	}{
		{"a new process's heap: too little to free", 240 << 10, 200 << 10, 100, false},
		{"just under the least", restoreCollectMin - 1, 2 * mib, 100, false},
		{"the least", restoreCollectMin, 2 * mib, 100, true},
		{"a closed engine's tables", 60 * mib, 45 * mib, 100, true},
		// The bench's warm restarts: the closed engine was live at the
		// last cycle, and the dumps since left garbage beside it.
		{"a closed engine's tables and more garbage", 70 * mib, 45 * mib, 100, true},
		{"the most live a collection should mark", 100 * mib, 64 * mib, 100, true},
		{"more live", 100 * mib, 64*mib + 1, 100, false},
		{"the most objects, whatever was live", restoreCollectMax, 10 * mib, 100, true},
		{"more objects", restoreCollectMax + 1, 10 * mib, 100, false},
		{"collector off", 60 * mib, 45 * mib, -1, false},
		{"GOGC=0 still collects", 60 * mib, 45 * mib, 0, true},
	} {
		why := collectSkipReason(c.objects, c.live, c.gogc)
		assert.Equal(t, c.runs, why == "", "%s: %q", c.name, why)
	}
}

// garbageOf leaves n bytes of pointer-free garbage on the heap (made in
// 64 KiB pieces, as tables are, not one large object) and returns the
// heap's objects after it.
//
//go:noinline
func garbageOf(n int) uint64 {
	pieces := make([][]byte, 0, n>>16)
	for range n >> 16 {
		pieces = append(pieces, make([]byte, 64<<10))
	}
	runtime.KeepAlive(pieces)
	objects, _ := readMetric("/memory/classes/heap/objects:bytes")
	return objects
}

// What a closed engine left (here 24 MiB of garbage) is freed before the
// next restore, unless the collection is turned off or there is nothing
// to restore.
func TestCollectionBeforeRestoreFreesWhatTheProcessLetGo(t *testing.T) {
	withGCPercent(t, 10000) // no cycle of the collector's own in between
	log := logrus.NewEntry(logrus.New())
	const garbage = 24 << 20
	for _, c := range restoreStepCases(Config{NoRestoreCollect: true}) {
		runtime.GC()
		before := garbageOf(garbage)
		ran := collectBeforeRestore(c.cfg, log)
		after, _ := readMetric("/memory/classes/heap/objects:bytes")
		assert.Equal(t, c.runs, ran, c.name)
		if c.runs {
			assert.Less(t, after, before-garbage*3/4, "%s: the garbage is freed", c.name)
		} else {
			assert.GreaterOrEqual(t, after, before-garbage/4, "%s: the garbage is still there", c.name)
		}
	}
}

func TestServicesArePinnedWhenEitherServiceMapsPinIsThere(t *testing.T) {
	for _, c := range []struct {
		name   string
		pins   []string
		cfg    Config
		pinned bool
	}{
		{"every map pinned", maps.Names, Config{}, true},
		{"no pin", nil, Config{}, false},
		{"the IPv6 service map pinned", []string{maps.Service6Name, maps.Backend4Name}, Config{}, true},
		{"the IPv4 service map pinned", []string{maps.Service4Name}, Config{}, true},
		{"other maps pinned, no service map", []string{maps.Backend4Name, maps.Backend6Name, maps.RevNAT4Name}, Config{}, false},
		{"every map pinned, to be recreated", maps.Names, Config{RecreateMaps: true}, false},
		{"every map pinned, maps in memory", maps.Names, Config{InMemory: true}, false},
	} {
		root := t.TempDir() // servicesPinned only looks for the files
		for _, name := range c.pins {
			require.NoError(t, os.WriteFile(filepath.Join(root, name), nil, 0o600))
		}
		cfg := c.cfg
		cfg.BPFRoot = root
		assert.Equal(t, c.pinned, servicesPinned(cfg), c.name)
	}
}

// logged returns the messages of the entries the hook caught that start
// with prefix.
func logged(h *logtest.Hook, prefix string) []string {
	var out []string
	for _, e := range h.AllEntries() {
		if strings.HasPrefix(e.Message, prefix) {
			out = append(out, e.Message)
		}
	}
	return out
}

// The first New on a directory creates the maps: there is nothing to
// restore, and the heap is left alone. The next New finds them pinned and
// frees what the process let go before it restores.
func TestNewPreparesTheHeapOnlyForMapsFoundPinned(t *testing.T) {
	noMemoryLimit(t)
	root := testutil.PinDir(t) // kernel maps: in-memory ones are not found again
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	e := newEngine(t, root, Config{Logger: log})
	assert.Equal(t, []string{"restore heap: no service map is pinned, nothing to restore"}, logged(hook, "restore heap"))
	require.NoError(t, e.Close())

	hook.Reset()
	withGCPercent(t, 10000) // no cycle of the collector's own in between
	runtime.GC()
	garbageOf(24 << 20)
	newEngine(t, root, Config{Logger: log})
	msgs := logged(hook, "restore heap")
	require.NotEmpty(t, msgs)
	assert.Equal(t, "restore heap: collected first", msgs[0], "all: %q", msgs)
	for _, e := range hook.AllEntries() {
		if e.Message == "restore heap: collected first" {
			assert.GreaterOrEqual(t, e.Data["freed_mib"], uint64(16), "the garbage is freed")
		}
	}
}
