package actorlb

import (
	"math"
	"runtime/debug"
)

// RestoreHeadroom is the heap New holds while the engine restores from
// the pinned maps (Config.NoRestoreHeadroom turns it off).
//
// Go's collector starts a cycle each time the heap doubles from what the
// last cycle left. A process that has just started has a few MB of heap,
// and a restore of 10,000 services of 10 backends builds some 40 MB of
// tables from the dumps: three or four cycles while the restore runs,
// each marking the tables built so far, on the cores the dumps and the
// rebuild need. A buffer of 64 MiB that nothing reads or writes, live
// until the restore is done, moves the next cycle past the restore (the
// README's Performance section has the figures). It holds no pointers
// (nothing to mark) and is address space more than memory: the runtime
// maps fresh pages for it, which stay untouched, unless it reuses pages
// freed before (an engine made again in the same process), which it then
// clears. It is dropped when New returns.
const RestoreHeadroom = 64 << 20

// restoreHeadroom returns the buffer New holds while the engine restores,
// or nil when it holds none: turned off, nothing to restore (NoRestore,
// InMemory), or a memory limit set (GOMEMLIMIT, debug.SetMemoryLimit),
// which the buffer would count against, making the collector run more,
// not less.
func restoreHeadroom(cfg Config) []byte {
	if cfg.NoRestoreHeadroom || cfg.NoRestore || cfg.InMemory || memoryLimited() {
		return nil
	}
	return make([]byte, RestoreHeadroom)
}

// memoryLimited reports whether the process has a soft memory limit
// (debug.SetMemoryLimit with a negative value reads it).
func memoryLimited() bool { return debug.SetMemoryLimit(-1) != math.MaxInt64 }
