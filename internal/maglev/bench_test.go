package maglev

import (
	"fmt"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// BenchmarkBuild builds tables of size M for N backends of weight 1, with
// a fresh Builder and no destination each time: B/op is the scratch
// memory plus the table (4 bytes per entry).
func BenchmarkBuild(b *testing.B) {
	for _, tc := range []struct {
		m uint32
		n int
	}{{DefaultTableSize, 10}, {DefaultTableSize, 100}, {DefaultTableSize, 1000}, {MaxTableSize, 1000}, {MaxTableSize, 10000}} {
		bs := backends(tc.n, 1)
		b.Run(fmt.Sprintf("M=%d/N=%d", tc.m, tc.n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var bl Builder
				if _, err := bl.Build(tc.m, 0, bs, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRebuild rebuilds a table of 16381 entries for 1,000 backends
// with a Builder and destination kept between calls (the steady state of
// an owner that rebuilds on backend changes).
func BenchmarkRebuild(b *testing.B) {
	bs := backends(1000, 1)
	var bl Builder
	var dst []lb.BackendID
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = bl.Build(DefaultTableSize, 0, bs, dst); err != nil {
			b.Fatal(err)
		}
	}
}
