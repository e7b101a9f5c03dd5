package main

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/benchset"
	"github.com/actorlb/actorlb/internal/maglev"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
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
		res.add(scen, "alloc_bytes_per_build", allocated(&m0, &m1)/rounds, "bytes")
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

// maglevServiceScenarios measures maglev services through the engine (the
// default table size, kernel maps): n services of ten backends created on
// a fresh engine by callers goroutines in UpsertBatch calls of 100, the
// engine restarted (warm: the restore reads every table, builds it again
// and compares), the services deleted in DeleteBatch calls of 100; then
// created again on a fresh engine in one Upsert each. Rates and process
// CPU per service, the restart's ready time and CPU. A maglev service's
// table is an inner map of the outer lb4_maglev, whose every update or
// delete from user space makes the kernel wait for an RCU grace period:
// the owner adds the new tables of a flush in one batch.
func maglevServiceScenarios(res *results, root string, n, callers int, log *logrus.Logger) error {
	scen := fmt.Sprintf("maglev-services-%d-x10", n)
	svcs := benchset.Sequential(n, 10)
	for _, s := range svcs {
		s.LBAlgorithm = lb.LBAlgMaglev
	}
	fes := make([]lb.L3n4Addr, len(svcs))
	for i, s := range svcs {
		fes[i] = s.Frontend.L3n4Addr
	}
	ctx := context.Background()
	sizes := maps.Sizes{Services: 1 << 16, Backends: 1 << 16, RevNAT: 1 << 13}
	for _, how := range []string{"batched", "single_calls"} {
		dir := fmt.Sprintf("%s/maglev-%s", root, how)
		e, err := actorlb.New(ctx, engineConfig(dir, sizes, log))
		if err != nil {
			return err
		}
		cpu0, start := cpuTime(), time.Now()
		if how == "batched" {
			err = forAll(chunk(svcs, 100), callers, func(c []*lb.Service) error {
				rs, err := e.UpsertBatch(ctx, c)
				return firstErr(rs, err, func(r actorlb.UpsertResult) error { return r.Err })
			})
		} else {
			err = forAll(svcs, callers, func(s *lb.Service) error {
				_, _, err := e.Upsert(ctx, s)
				return err
			})
		}
		wall, cpu := time.Since(start), cpuTime()-cpu0
		if err != nil {
			e.Close()
			return fmt.Errorf("%s: create: %w", scen, err)
		}
		suffix := ""
		if how != "batched" {
			suffix = "_" + how
		}
		res.add(scen, "create_services_per_s"+suffix, float64(len(svcs))/wall.Seconds(), "services/s")
		res.add(scen, "create_cpu_us_per_service"+suffix, usPer(cpu, len(svcs)), "us")
		if how == "batched" {
			// A warm restart: ready once every table was read, built
			// again and compared.
			if err := e.Close(); err != nil {
				return err
			}
			cpu0, start = cpuTime(), time.Now()
			e, err = actorlb.New(ctx, engineConfig(dir, sizes, log))
			wall, cpu = time.Since(start), cpuTime()-cpu0
			if err != nil {
				return fmt.Errorf("%s: restore: %w", scen, err)
			}
			res.add(scen, "restore_ready_ms", float64(wall.Microseconds())/1000, "ms")
			res.add(scen, "restore_cpu_ms", float64(cpu.Microseconds())/1000, "ms")
			cpu0, start = cpuTime(), time.Now()
			err = forAll(chunk(fes, 100), callers, func(c []lb.L3n4Addr) error {
				rs, err := e.DeleteBatch(ctx, c)
				return firstErr(rs, err, func(r actorlb.DeleteResult) error { return r.Err })
			})
			wall, cpu = time.Since(start), cpuTime()-cpu0
			if err != nil {
				e.Close()
				return fmt.Errorf("%s: delete: %w", scen, err)
			}
			res.add(scen, "delete_services_per_s", float64(len(svcs))/wall.Seconds(), "services/s")
			res.add(scen, "delete_cpu_us_per_service", usPer(cpu, len(svcs)), "us")
		}
		if err := retire(e, dir, nil); err != nil {
			return err
		}
	}
	return nil
}
