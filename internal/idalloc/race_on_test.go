//go:build race

package idalloc_test

const raceEnabled = true
