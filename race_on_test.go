//go:build race

package actorlb

// raceEnabled: the race detector makes sync.Pool drop a quarter of what it
// is given, so tests of reuse through one read it.
const raceEnabled = true
