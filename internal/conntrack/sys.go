package conntrack

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Monotonic returns CLOCK_MONOTONIC in nanoseconds, the clock of
// bpf_ktime_get_ns and so of every last_seen.
func Monotonic() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // never fails on Linux
	}
	return uint64(ts.Nano())
}

func isNoSpace(err error) bool { return errors.Is(err, unix.ENOSPC) }
