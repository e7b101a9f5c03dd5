package hugepages

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPolicyIsTheBracketedWord(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"always [madvise] never\n", "madvise"},
		{"[always] madvise never", "always"},
		{"always madvise [never]", "never"},
		{"always madvise never", ""},
		{"", ""},
		{"] [", ""},
	} {
		assert.Equal(t, c.want, parsePolicy(c.in), "%q", c.in)
	}
}

func TestAlignedIsTheLargestWholePagesInside(t *testing.T) {
	const page = 2 << 20
	for _, c := range []struct {
		p, n, off, length uintptr
	}{
		{0, 4 * page, 0, 4 * page},
		{1, 4 * page, page - 1, 3 * page},
		{page - 4096, 2 * page, 4096, page},
		{page + 1, page, 0, 0}, // no whole page inside
		{3 * page, 0, 0, 0},    // empty
		{page, page - 1, 0, 0}, // too short
		{page, page, 0, page},  // exactly one
	} {
		off, length := aligned(c.p, c.n, page)
		assert.Equal(t, [2]uintptr{c.off, c.length}, [2]uintptr{off, length}, "p=%#x n=%#x", c.p, c.n)
	}
}

// Prepare works only where it pays: the kernel's policy is madvise, and
// the heap has neither much free memory (reused first) nor much live
// (the collection marks it).
func TestPrepareSkipsWhereItCannotPay(t *testing.T) {
	small := heap{free: 1 << 20, released: 3 << 20, live: 4 << 20}
	for _, c := range []struct {
		name   string
		n      int
		policy string
		h      heap
		skip   string // a part of the reason, "" if it works
	}{
		{"a fresh heap under madvise", 64 << 20, "madvise", small, ""},
		{"no huge pages", 64 << 20, "", small, "no transparent huge pages"},
		{"always", 64 << 20, "always", small, `"always"`},
		{"never", 64 << 20, "never", small, `"never"`},
		{"much free", 64 << 20, "madvise", heap{free: 10 << 20, released: 10 << 20}, "20 MiB free"},
		{"much live", 64 << 20, "madvise", heap{live: 100 << 20}, "100 MiB live"},
		{"too small", 1 << 20, "madvise", small, "no aligned huge page"},
	} {
		why := skipReason(c.n, 2<<20, c.policy, c.h)
		if c.skip == "" {
			assert.Empty(t, why, c.name)
		} else {
			assert.Contains(t, why, c.skip, c.name)
		}
	}
}

func TestGODEBUGDisablethpTurnsPrepareOff(t *testing.T) {
	for _, c := range []struct {
		in  string
		off bool
	}{
		{"", false},
		{"disablethp=1", true},
		{"gctrace=1,disablethp=1", true},
		{"disablethp=0", false},
		{"disablethp=1,disablethp=0", false},
		{"madvdontneed=1", false},
	} {
		assert.Equal(t, c.off, thpDisabled(c.in), "%q", c.in)
	}
	t.Setenv("GODEBUG", "disablethp=1")
	r := Prepare(64 << 20)
	assert.Zero(t, r.Advised)
	assert.Contains(t, r.Skipped, "disablethp")
}

// Under a memory limit Prepare advises nothing (a huge page is resident
// whole, and the limit would be reached sooner) and says so.
func TestAMemoryLimitTurnsPrepareOff(t *testing.T) {
	old := debug.SetMemoryLimit(1 << 40)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	assert.True(t, MemoryLimited())
	r := Prepare(64 << 20)
	assert.Zero(t, r.Advised)
	assert.Contains(t, r.Skipped, "memory limit")
	debug.SetMemoryLimit(math.MaxInt64)
	assert.False(t, MemoryLimited(), "no limit")
}
