package actorlb

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/actorlb/actorlb/internal/hugepages"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
)

// RestoreHeadroom is how far New raises the collector's heap goal while
// the engine restores from the pinned maps (Config.NoRestoreHeadroom
// turns it off).
//
// Go's collector starts a cycle each time the heap doubles from what the
// last cycle left. A process that has just started has a few MB of heap,
// and a restore of 10,000 services of 10 backends builds some 40 MB of
// tables from the dumps: three or four cycles while the restore runs,
// each marking the tables built so far, on the cores the dumps and the
// rebuild need. With the goal raised by 64 MiB (as if that much more
// were live), the next cycle comes after the restore
// (docs/performance-history.md has the figures). Nothing is allocated for it: the
// collector's percent (GOGC) is raised for the restore and put back when
// New returns.
const RestoreHeadroom = 64 << 20

// minHeapGoalBase is the heap the percent is computed from when the last
// cycle left less (or none ran yet): the runtime's own least goal, 4 MB
// at GOGC=100.
const minHeapGoalBase = 4 << 20

// gcPercent is the process's collector percent while New restores. The
// percent is the process's, so engines made at the same time share one
// raise: the first raises it, the last puts back what was there.
var gcPercent struct {
	sync.Mutex
	holders int
	saved   int // the percent before the first holder
	set     int // the percent the first holder set
}

// raiseHeapGoal raises the collector's heap goal by RestoreHeadroom for a
// restore and returns what puts it back. It does nothing when turned off,
// when there is nothing to restore (NoRestore, InMemory), when the
// collector is off (GOGC=off), or under a memory limit (GOMEMLIMIT,
// debug.SetMemoryLimit), which the raised goal would run into. If the
// percent was changed by someone else meanwhile, the put back keeps
// theirs.
func raiseHeapGoal(cfg Config) (putBack func()) {
	if cfg.NoRestoreHeadroom || !restoreHeapTunable(cfg) {
		return func() {}
	}
	gcPercent.Lock()
	defer gcPercent.Unlock()
	if gcPercent.holders == 0 {
		old := readGCPercent()
		if old < 0 {
			return func() {}
		}
		gcPercent.saved, gcPercent.set = old, headroomPercent(old, liveHeap())
		debug.SetGCPercent(gcPercent.set)
	}
	gcPercent.holders++
	var once sync.Once
	return func() {
		once.Do(func() {
			gcPercent.Lock()
			defer gcPercent.Unlock()
			gcPercent.holders--
			if gcPercent.holders > 0 {
				return
			}
			if cur := debug.SetGCPercent(gcPercent.saved); cur != gcPercent.set {
				debug.SetGCPercent(cur) // changed meanwhile: theirs stays
			}
		})
	}
}

// headroomPercent is the collector percent whose heap goal, from a heap
// of live bytes, is what percent old gives with RestoreHeadroom more
// live: (live+headroom)×(1+old/100) = live×(1+p/100).
func headroomPercent(old int, live uint64) int {
	base := max(live, minHeapGoalBase*uint64(max(old, 1))/100, 1)
	goal := float64(base+RestoreHeadroom) * (1 + float64(old)/100)
	p := goal/float64(base)*100 - 100
	if p > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Ceil(p))
}

// readGCPercent is the collector's percent, -1 when it is off (GOGC=off).
// (debug.SetGCPercent(-1) would read it too, but waits for a mark phase
// under way to finish.)
func readGCPercent() int {
	p, ok := readMetric("/gc/gogc:percent")
	if !ok {
		return 100
	}
	// The runtime reports GOGC=off as its internal -1 in a uint64.
	return int(int64(p))
}

// liveHeap is the heap the last cycle marked live (0 before the first).
func liveHeap() uint64 {
	live, _ := readMetric("/gc/heap/live:bytes")
	return live
}

// readMetric reads one runtime metric of kind uint64; ok is false when
// the runtime has no such metric.
func readMetric(name string) (v uint64, ok bool) {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return s[0].Value.Uint64(), true
}

// restoreHeapTunable reports whether New may tune the heap for a restore
// (the headroom, the huge pages): there is one (not NoRestore, not
// InMemory) and the process has no memory limit.
func restoreHeapTunable(cfg Config) bool {
	return restores(cfg) && !hugepages.MemoryLimited()
}

// restores reports whether New restores from pinned maps under cfg (not
// NoRestore, not InMemory).
func restores(cfg Config) bool { return !cfg.NoRestore && !cfg.InMemory }

// prepareHeapPages asks for transparent huge pages for the heap the
// restore is about to fill (hugepages.Prepare, RestoreHeadroom bytes),
// unless turned off (Config.NoRestoreHugePages) or there is nothing to
// restore (NoRestore, InMemory) or the process has a memory limit. It
// runs after the goal is raised: the buffer Prepare allocates then stays
// under the goal (under the program's own goal, a new process's 4 MB, it
// would start a cycle before Prepare's collection runs another), and
// Prepare's collection leaves the same live heap the percent was
// computed from. It returns what Prepare did, tried false when it was
// not called.
func prepareHeapPages(cfg Config, log *logrus.Entry) (r hugepages.Result, tried bool) {
	if cfg.NoRestoreHugePages || !restoreHeapTunable(cfg) {
		return r, false
	}
	r = hugepages.Prepare(RestoreHeadroom)
	if r.Skipped != "" {
		log.WithField("reason", r.Skipped).Debug("restore heap: no huge pages asked for")
	} else {
		log.WithFields(logrus.Fields{"advised_mib": r.Advised >> 20, "took": r.Took}).Debug("restore heap: huge pages asked for")
	}
	return r, true
}

// prepareRestoreHeap readies the heap for the restore of the maps New
// opens (pinned: servicesPinned, read before they open), and returns what
// puts the collector's percent back when the restore is done. New runs it
// while the maps open. In this order: one collection first
// (collectBeforeRestore), then the goal is raised (raiseHeapGoal, whose
// percent is computed from the heap the collection left), then the huge
// pages (prepareHeapPages: its buffer of RestoreHeadroom bytes, under the
// raised goal, starts no cycle of its own; its one collection frees it).
// When no service map is pinned there is nothing to restore: no
// collection and no huge pages, whose cost (milliseconds) would buy
// nothing; the goal is raised all the same (it costs nothing, and a
// restore of nothing ends at once).
func prepareRestoreHeap(cfg Config, pinned bool, log *logrus.Entry) (putBack func()) {
	if pinned {
		collectBeforeRestore(cfg, log)
	} else {
		log.Debug("restore heap: no service map is pinned, nothing to restore")
	}
	putBack = raiseHeapGoal(cfg)
	if pinned {
		prepareHeapPages(cfg, log)
	}
	return putBack
}

// servicesPinned reports whether a service map (of either family) is
// pinned under cfg's root, where Open will find it: then there may be
// services to restore. Maps in memory or recreated have none. It is read
// before Open, so that the heap is readied while the maps open; a pin
// Open then refuses (another shape) only made the readying useless.
func servicesPinned(cfg Config) bool {
	if cfg.InMemory || cfg.RecreateMaps {
		return false
	}
	root := cmp.Or(cfg.BPFRoot, maps.DefaultRoot)
	for _, name := range []string{maps.Service4Name, maps.Service6Name} {
		if _, err := os.Lstat(filepath.Join(root, name)); err == nil {
			return true
		}
	}
	return false
}

// restoreCollectMin is the least heap (live objects and garbage not yet
// freed) New collects before a restore: the runtime's own least goal; a
// heap this small frees too little to matter.
const restoreCollectMin = 4 << 20

// restoreCollectMax is the most heap of objects New collects before a
// restore, whatever the last collection found live: under GOGC=100 a heap
// whose last marked live heap is at most hugepages.LiveMax holds at most
// some 2× that (more with a raised goal or a larger GOGC), so this bounds
// what a collection can mark when the live heap grew since.
const restoreCollectMax = 4 * hugepages.LiveMax

// collectBeforeRestore runs one collection before the restore when the
// heap holds at least restoreCollectMin bytes of objects and the live
// heap the last collection marked is at most hugepages.LiveMax (what this
// one marks is the live heap, milliseconds per 10 MB: the last marked
// one is its estimate; an engine closed since counts in it, though this
// collection will not mark it), within restoreCollectMax bytes of
// objects. Then the garbage the process let go (above all an engine
// closed before this one, its tables tens of MB) is free when the
// restore allocates: the restore reuses pages already written instead of
// fresh ones, each of which is a page fault on first write (some 15 µs
// on the development VM: docs/performance-history.md). It does
// nothing when turned off (Config.NoRestoreCollect), when there is
// nothing to restore (NoRestore, InMemory), or when the collector is off
// (GOGC=off). It returns whether it collected.
func collectBeforeRestore(cfg Config, log *logrus.Entry) bool {
	if cfg.NoRestoreCollect || !restores(cfg) {
		return false
	}
	objects, _ := readMetric("/memory/classes/heap/objects:bytes")
	live, _ := readMetric("/gc/heap/live:bytes")
	if why := collectSkipReason(objects, live, readGCPercent()); why != "" {
		log.WithField("reason", why).Debug("restore heap: no collection first")
		return false
	}
	start := time.Now()
	runtime.GC()
	after, _ := readMetric("/memory/classes/heap/objects:bytes")
	log.WithFields(logrus.Fields{
		"objects_mib": objects >> 20, "last_live_mib": live >> 20, "freed_mib": (objects - min(after, objects)) >> 20, "took": time.Since(start),
	}).Debug("restore heap: collected first")
	return true
}

// collectSkipReason is why no collection runs before a restore on a heap
// of objects bytes, of which the last collection marked live bytes, under
// the collector percent gogc (-1: off); "" when one runs.
func collectSkipReason(objects, live uint64, gogc int) string {
	switch {
	case gogc < 0:
		return "the collector is off (GOGC=off)"
	case objects < restoreCollectMin:
		return fmt.Sprintf("the heap holds %d KiB, too little to free", objects>>10)
	case live > hugepages.LiveMax:
		return fmt.Sprintf("the last collection found %d MiB live, more than a collection should mark here", live>>20)
	case objects > restoreCollectMax:
		return fmt.Sprintf("the heap holds %d MiB, more than a collection should mark here", objects>>20)
	}
	return ""
}
