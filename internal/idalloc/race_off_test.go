//go:build !race

package idalloc_test

const raceEnabled = false
