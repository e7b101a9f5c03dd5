package actorlb

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// noMemoryLimit lifts the process's memory limit (GOMEMLIMIT) for the
// test.
func noMemoryLimit(t *testing.T) {
	t.Helper()
	old := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

func TestRestoreHeadroomIsHeldOnlyWhenARestoreCanUseIt(t *testing.T) {
	noMemoryLimit(t)
	for _, c := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"default", Config{}, RestoreHeadroom},
		{"turned off", Config{NoRestoreHeadroom: true}, 0},
		{"nothing restored", Config{NoRestore: true}, 0},
		{"in-memory maps", Config{InMemory: true}, 0},
	} {
		assert.Len(t, restoreHeadroom(c.cfg), c.want, c.name)
	}
}

func TestRestoreHeadroomIsNotHeldUnderAMemoryLimit(t *testing.T) {
	noMemoryLimit(t)
	debug.SetMemoryLimit(1 << 40)
	assert.Nil(t, restoreHeadroom(Config{}))
	debug.SetMemoryLimit(math.MaxInt64)
	assert.Len(t, restoreHeadroom(Config{}), RestoreHeadroom, "no limit again")
}
