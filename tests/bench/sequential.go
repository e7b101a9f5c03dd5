package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/benchset"
	"github.com/actorlb/actorlb/internal/enginetest"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
)

// sequentialN is the number of services of the sequential scenario.
const sequentialN = 2000

// sequential times single Upsert calls of new 10-backend services made
// one after the other on an engine doing nothing else (a user's or a
// controller's call on a quiet agent), with the supervisor's ID lease
// (the default) and without it (enginetest.Hooks.NoIDLease), three
// rounds each on fresh engines, alternated; the samples of each are
// pooled. It adds the latency quantiles and the CPU per call of both,
// and the lease's p50 and p90 as a ratio to those without it.
func sequential(res *results, root string, sizes maps.Sizes, log *logrus.Logger) error {
	ctx := context.Background()
	svcs := benchset.Sequential(sequentialN, 10)
	samples := map[bool][]time.Duration{}
	cpus := map[bool][]time.Duration{}
	for round := range 3 {
		for _, lease := range []bool{true, false} {
			dir := fmt.Sprintf("%s/seq-%d-%v", root, round, lease)
			cfg := engineConfig(dir, sizes, log)
			if !lease {
				cfg = enginetest.With(cfg, enginetest.Hooks{NoIDLease: true})
			}
			e, err := actorlb.New(ctx, cfg)
			if err != nil {
				return err
			}
			cpu0 := cpuTime()
			for _, s := range svcs {
				start := time.Now()
				_, _, err = e.Upsert(ctx, s)
				if err != nil {
					break
				}
				samples[lease] = append(samples[lease], time.Since(start))
			}
			cpus[lease] = append(cpus[lease], cpuTime()-cpu0)
			if err := retire(e, dir, err); err != nil {
				return err
			}
		}
	}
	probes := map[bool]*latencyProbe{}
	for _, lease := range []bool{true, false} {
		slices.Sort(samples[lease])
		p := &latencyProbe{samples: samples[lease]}
		probes[lease] = p
		suffix := ""
		if !lease {
			suffix = "_no_lease"
		}
		res.add("sequential-2k-x10", "p50_us"+suffix, p.p(50), "us")
		res.add("sequential-2k-x10", "p90_us"+suffix, p.p(90), "us")
		res.add("sequential-2k-x10", "p99_us"+suffix, p.p(99), "us")
		res.add("sequential-2k-x10", "cpu_us_per_service"+suffix, float64(median(cpus[lease]).Microseconds())/sequentialN, "us")
	}
	res.add("sequential-2k-x10", "p50_ratio_lease_to_no_lease", probes[true].p(50)/probes[false].p(50), "x")
	res.add("sequential-2k-x10", "p90_ratio_lease_to_no_lease", probes[true].p(90)/probes[false].p(90), "x")
	return nil
}
