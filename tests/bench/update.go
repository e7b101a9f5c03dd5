package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/sirupsen/logrus"
)

// endpointChange is update-10k-x10: an endpoint change on every service
// of the bulk, as Kubernetes sends them when pods are replaced. On a
// fresh engine holding the bulk (written first, not timed), every service
// is upserted again with its last backend replaced by a new one (nine
// kept, one removed, one fresh) through UpsertBatch, callers goroutines,
// batch services per call; three rounds, the medians reported, with the
// CPU time and bytes allocated per service. Its floor writes the kernel
// changes such an update makes, batched, to maps holding the bulk: the new
// backends, the slots that point at them, and the old backends deleted
// (three entries a service; the engine writes only entries that change).
func endpointChange(res *results, root string, sizes maps.Sizes, bulk []*lb.Service, callers, batch int, log *logrus.Logger) error {
	ctx := context.Background()
	updated := make([]*lb.Service, len(bulk))
	for i, s := range bulk {
		u := s.DeepCopy()
		u.Backends[len(u.Backends)-1].L3n4Addr = lb.L3n4Addr{ // clear of the bulk's 10.1.0.0/16 and up
			Addr: netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)}), Port: 8080, Protocol: lb.TCP,
		}
		updated[i] = u
	}
	floorWall, floorCPU, err := updateFloor(root+"-floor", sizes, bulk, updated)
	if err != nil {
		return err
	}
	var walls, cpus []time.Duration
	var allocs []float64
	for round := range 3 {
		dir := fmt.Sprintf("%s-%d", root, round)
		e, err := actorlb.New(ctx, engineConfig(dir, sizes, log))
		if err != nil {
			return err
		}
		if err := forAll(chunk(bulk, batch), callers, func(c []*lb.Service) error {
			rs, err := e.UpsertBatch(ctx, c)
			return firstErr(rs, err, func(r actorlb.UpsertResult) error { return r.Err })
		}); err != nil {
			return retire(e, dir, err)
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		stopProfile := func() {}
		if round == 2 {
			stopProfile = profileTo(updateProfile)
		}
		cpu0, start := cpuTime(), time.Now()
		err = forAll(chunk(updated, batch), callers, func(c []*lb.Service) error {
			rs, err := e.UpsertBatch(ctx, c)
			return firstErr(rs, err, func(r actorlb.UpsertResult) error {
				if r.Err == nil && r.Created {
					return errors.New("update-10k-x10: an update created a service")
				}
				return r.Err
			})
		})
		walls, cpus = append(walls, time.Since(start)), append(cpus, cpuTime()-cpu0)
		stopProfile()
		runtime.ReadMemStats(&m1)
		allocs = append(allocs, allocated(&m0, &m1)/float64(len(updated)))
		if err := retire(e, dir, err); err != nil {
			return err
		}
	}
	n := float64(len(updated))
	res.add("update-10k-x10", "services_per_s", n/median(walls).Seconds(), "services/s")
	res.add("update-10k-x10", "cpu_us_per_service", float64(median(cpus).Microseconds())/n, "us")
	res.add("update-10k-x10", "alloc_bytes_per_service", median(allocs), "bytes")
	res.add("update-10k-x10", "batch_floor_services_per_s", n/floorWall.Seconds(), "services/s")
	res.add("update-10k-x10", "batch_floor_cpu_us_per_service", float64(floorCPU.Microseconds())/n, "us")
	res.add("update-10k-x10", "cpu_ratio_to_batch_floor", median(cpus).Seconds()/floorCPU.Seconds(), "x")
	return nil
}

// updateFloor writes the kernel changes of updated (each the service of
// bulk at its index with its last backend replaced) to fresh maps that
// hold bulk's entries (written first, not timed): one BatchUpdate of the
// new backends (IDs after the bulk's), one of the last slots pointing at
// them, one BatchDelete of the old backends. Three passes; it returns the
// medians of their wall and CPU times.
func updateFloor(root string, sizes maps.Sizes, bulk, updated []*lb.Service) (wall, cpu time.Duration, err error) {
	svc, be, rev := entries(bulk)
	var newBEs []maps.BackendEntry
	var slots []maps.ServiceEntry
	var gone [][4]byte
	id := lb.BackendID(len(be)) // entries numbers the bulk's backends 1..len(be)
	first := 0                  // the bulk's first backend ID of service i, less one
	for i, u := range updated {
		t := &table.Service{Spec: *u}
		t.Spec.Frontend.ID = lb.ServiceID(i%65535 + 1) // as entries numbers them
		for j := range u.Backends {
			t.BackendIDs = append(t.BackendIDs, lb.BackendID(first+j+1))
		}
		last := len(u.Backends) - 1
		gone = append(gone, maps.MarshalBackendKey(uint32(t.BackendIDs[last])))
		id++
		t.BackendIDs[last] = id
		newBEs = append(newBEs, table.BackendEntries(t)[last])
		for _, s := range table.Slots(t) {
			if s.Value.BackendID == uint32(id) {
				slots = append(slots, s)
			}
		}
		first += len(u.Backends)
	}
	if len(slots) != len(updated) {
		return 0, 0, fmt.Errorf("update floor: %d slots changed for %d services", len(slots), len(updated))
	}
	bk, bv := marshalBackends(be)
	sk, sv := marshalServices(svc)
	rk, rv := marshalRevNAT(rev)
	nbk, nbv := marshalBackends(newBEs)
	nsk, nsv := marshalServices(slots)
	var walls, cpus []time.Duration
	for pass := range 3 {
		dir := fmt.Sprintf("%s%d", root, pass)
		lbm, err := maps.Open(maps.Config{Root: dir, MaxEntries: sizes})
		if err != nil {
			return 0, 0, err
		}
		lbm.Close()
		open := func(name string) (*ebpf.Map, error) { return ebpf.LoadPinnedMap(dir+"/"+name, nil) }
		bm, err := open(maps.Backend4Name)
		if err != nil {
			return 0, 0, err
		}
		sm, err := open(maps.Service4Name)
		if err != nil {
			bm.Close()
			return 0, 0, err
		}
		rm, err := open(maps.RevNAT4Name)
		if err != nil {
			bm.Close()
			sm.Close()
			return 0, 0, err
		}
		err = errors.Join(batchPut(rawMap{bm, bk, bv}), batchPut(rawMap{sm, sk, sv}), batchPut(rawMap{rm, rk, rv}))
		if err == nil {
			cpu0, start := cpuTime(), time.Now()
			err = errors.Join(batchPut(rawMap{bm, nbk, nbv}), batchPut(rawMap{sm, nsk, nsv}))
			if err == nil {
				_, err = bm.BatchDelete(slices.Clone(gone), nil)
			}
			walls, cpus = append(walls, time.Since(start)), append(cpus, cpuTime()-cpu0)
		}
		bm.Close()
		sm.Close()
		rm.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("update floor: %w", err)
		}
		if err := maps.Remove(dir); err != nil {
			return 0, 0, err
		}
	}
	return median(walls), median(cpus), nil
}
