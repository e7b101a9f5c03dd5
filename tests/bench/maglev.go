package main

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/actorlb/actorlb/internal/maglev"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// maglevScenarios measures the Maglev tables (internal/maglev) against
// issue 17's targets: the build time and scratch memory for 1,000 backends
// in the default table and in the largest, and the disruption when one of
// the 1,000 backends is removed from the default table.
func maglevScenarios(res *results) error {
	bs := make([]maglev.Backend, 1000)
	for i := range bs {
		bs[i] = maglev.Backend{
			Addr:   lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 3, byte(i >> 8), byte(i)}), Port: 8080, Protocol: lb.TCP},
			ID:     lb.BackendID(i + 1),
			Weight: lb.DefaultBackendWeight,
		}
	}
	for _, m := range []uint32{maglev.DefaultTableSize, maglev.MaxTableSize} {
		const rounds = 21
		walls := make([]time.Duration, 0, rounds)
		var cpu time.Duration
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range rounds {
			var b maglev.Builder // fresh: its scratch is counted
			c0, t0 := cpuTime(), time.Now()
			if _, err := b.Build(m, 1, bs, nil); err != nil {
				return err
			}
			walls, cpu = append(walls, time.Since(t0)), cpu+cpuTime()-c0
		}
		runtime.ReadMemStats(&m1)
		scen := fmt.Sprintf("maglev-%d-x1000", m)
		res.add(scen, "build_ms", float64(median(walls).Microseconds())/1000, "ms")
		res.add(scen, "build_cpu_ms", float64(cpu.Microseconds())/1000/rounds, "ms")
		res.add(scen, "alloc_bytes_per_build", float64(m1.TotalAlloc-m0.TotalAlloc)/rounds, "bytes")
		res.add(scen, "table_bytes", float64(4*m), "bytes")
	}

	// Disruption: remove each of 20 backends in turn from the default
	// table; what changes besides the removed backend's own entries.
	m := uint32(maglev.DefaultTableSize)
	before, err := maglev.Build(m, 1, bs, nil)
	if err != nil {
		return err
	}
	var extras []float64
	for k := range 20 {
		gone := k * 50
		after, err := maglev.Build(m, 1, slices.Delete(slices.Clone(bs), gone, gone+1), nil)
		if err != nil {
			return err
		}
		own, changed := 0, len(maglev.Changed(before, after))
		for _, id := range before {
			if id == bs[gone].ID {
				own++
			}
		}
		extras = append(extras, float64(changed-own)/float64(m))
	}
	slices.Sort(extras)
	scen := fmt.Sprintf("maglev-%d-x1000", m)
	res.add(scen, "removal_changed_besides_own_pct_median", 100*extras[len(extras)/2], "%")
	res.add(scen, "removal_changed_besides_own_pct_max", 100*extras[len(extras)-1], "%")
	res.add(scen, "removal_own_share_pct", 100.0/float64(len(bs)), "%")
	return nil
}
