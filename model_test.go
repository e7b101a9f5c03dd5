package actorlb

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// checkInvariants checks the invariants 1-4 of docs/architecture.md on
// the maps and that the maps equal List() (invariant 5).
func checkInvariants(tb testing.TB, e *Engine) {
	tb.Helper()
	ctx := ctxT(tb)
	list, err := e.List(ctx)
	require.NoError(tb, err)
	m := e.maps
	ids := map[uint16]string{}
	beByAddr := map[string]uint32{}
	usedBe := map[uint32]bool{}
	var nServices int
	for _, f := range []maps.Family{maps.IPv4, maps.IPv6} {
		svcs, err := m.Services(f).Dump()
		require.NoError(tb, err)
		bes, err := m.Backends(f).Dump()
		require.NoError(tb, err)
		revs, err := m.RevNAT(f).Dump()
		require.NoError(tb, err)
		beMap := map[uint32]maps.BackendValue{}
		for _, b := range bes {
			beMap[b.ID] = b.Value
			a := fmt.Sprintf("%s/%d", netip.AddrPortFrom(b.Value.Address, b.Value.Port), b.Value.Proto)
			if other, dup := beByAddr[a]; dup {
				tb.Fatalf("invariant 4: backend %s under IDs %d and %d", a, other, b.ID)
			}
			beByAddr[a] = b.ID
		}
		revMap := map[uint16]maps.RevNATValue{}
		for _, r := range revs {
			revMap[r.ID] = r.Value
		}
		slots := map[maps.ServiceKey]maps.ServiceValue{}
		for _, s := range svcs {
			slots[s.Key] = s.Value
		}
		for k, v := range slots {
			if k.Slot != 0 {
				continue
			}
			nServices++
			fe := fmt.Sprintf("%v", k)
			if other, dup := ids[v.RevNATIndex]; dup {
				tb.Fatalf("invariant 4: service ID %d for %s and %s", v.RevNATIndex, other, fe)
			}
			ids[v.RevNATIndex] = fe
			for i := 1; i <= int(v.Count)+int(v.QCount); i++ {
				sk := k
				sk.Slot = uint16(i)
				sv, ok := slots[sk]
				require.True(tb, ok, "invariant 1: %s slot %d missing", fe, i)
				_, ok = beMap[sv.BackendID]
				require.True(tb, ok, "invariant 2: %s slot %d -> missing backend %d", fe, i, sv.BackendID)
				usedBe[sv.BackendID] = true
			}
			r, ok := revMap[v.RevNATIndex]
			require.True(tb, ok, "invariant 3: no revNAT for %s", fe)
			require.Equal(tb, k.Address, r.Address, "invariant 3: revNAT of %s", fe)
			require.Equal(tb, k.Port, r.Port, "invariant 3: revNAT of %s", fe)
		}
		// Backends only referenced by maintenance (no slot) would fail here;
		// the model never uses maintenance.
		for id := range beMap {
			require.True(tb, usedBe[id], "invariant 4: backend %d unreferenced", id)
		}
	}
	require.Equal(tb, len(list), nServices, "invariant 5: maps hold the services List returns")
	for _, svc := range list {
		require.Contains(tb, ids, uint16(svc.Frontend.ID), "invariant 5: service %d in the maps", svc.Frontend.ID)
	}
}

type modelSvc struct {
	id       lb.ServiceID
	backends map[string]lb.BackendState
}

func TestRandomOperationsAgainstModel(t *testing.T) {
	e := newEngine(t, "", Config{})
	seed := testutil.Seed(t)
	const workers, opsPer = 8, 1000
	// Each worker has its own backends (shared by its services): a backend
	// has one state across services, so sharing across workers would make
	// the outcome depend on their interleaving.
	pools := make([][]lb.Backend, workers)
	for w := range pools {
		pools[w] = make([]lb.Backend, 20)
		for i := range pools[w] {
			pools[w][i] = lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 1, byte(w), byte(i + 1)}), Port: 8080, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight}
		}
	}
	models := make([]map[string]*modelSvc, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		models[w] = map[string]*modelSvc{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			model := models[w]
			pool := pools[w]
			ctx := ctxT(t)
			// state of a backend used by any of this worker's services
			stateOf := func(b string) (lb.BackendState, bool) {
				for _, m := range model {
					if st, ok := m.backends[b]; ok {
						return st, true
					}
				}
				return 0, false
			}
			fes := make([]lb.L3n4Addr, 6)
			for i := range fes {
				fes[i] = lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 96, byte(w), byte(i + 1)}), Port: 80, Protocol: lb.TCP}
			}
			// gen returns a random upsert of fe over the worker's backends,
			// their states what the model allows, and the states it gives.
			gen := func(fe lb.L3n4Addr) (*lb.Service, map[string]lb.BackendState) {
				svc := &lb.Service{Frontend: lb.Frontend{L3n4Addr: fe}}
				nb := 1 + rng.IntN(8)
				picked := map[int]bool{}
				next := map[string]lb.BackendState{}
				for len(picked) < nb {
					i := rng.IntN(len(pool))
					if picked[i] {
						continue
					}
					picked[i] = true
					b := pool[i]
					prev, had := stateOf(b.String())
					switch {
					case had && prev == lb.BackendStateTerminating:
						b.State = lb.BackendStateTerminating
					case had:
						b.State = []lb.BackendState{lb.BackendStateActive, lb.BackendStateQuarantined}[rng.IntN(2)]
					default:
						b.State = []lb.BackendState{lb.BackendStateActive, lb.BackendStateActive, lb.BackendStateTerminating}[rng.IntN(3)]
					}
					svc.Backends = append(svc.Backends, b)
					next[b.String()] = b.State
				}
				return svc, next
			}
			// apply records an upsert of fe in the model (one state per
			// backend).
			apply := func(fe lb.L3n4Addr, id lb.ServiceID, next map[string]lb.BackendState) {
				model[fe.String()] = &modelSvc{id: id, backends: next}
				for _, m := range model {
					for b := range m.backends {
						if st, ok := next[b]; ok {
							m.backends[b] = st
						}
					}
				}
			}
			for n := range opsPer {
				fe := fes[rng.IntN(len(fes))]
				cur := model[fe.String()]
				switch r := rng.IntN(10); {
				case r < 6: // upsert
					svc, next := gen(fe)
					id, created, err := e.Upsert(ctx, svc)
					if err != nil {
						errs <- fmt.Errorf("worker %d op %d upsert: %w", w, n, err)
						return
					}
					if created != (cur == nil) || (cur != nil && cur.id != id) {
						errs <- fmt.Errorf("worker %d op %d: created=%v id=%d, model %+v", w, n, created, id, cur)
						return
					}
					apply(fe, id, next)
				case r < 7: // 2..4 upserts of distinct frontends in one batch
					var svcs []*lb.Service
					var olds []*modelSvc
					for _, i := range rng.Perm(len(fes))[:2+rng.IntN(3)] {
						svc, next := gen(fes[i])
						svcs, olds = append(svcs, svc), append(olds, model[fes[i].String()])
						apply(fes[i], 0, next) // as if called one by one; IDs below
					}
					rs, err := e.UpsertBatch(ctx, svcs)
					if err != nil {
						errs <- fmt.Errorf("worker %d op %d upsert batch: %w", w, n, err)
						return
					}
					for i, r := range rs {
						old := olds[i]
						if r.Err != nil || r.Created != (old == nil) || (old != nil && old.id != r.ID) {
							errs <- fmt.Errorf("worker %d op %d batch service %d: %+v, model had %+v", w, n, i, r, old)
							return
						}
						model[svcs[i].Frontend.L3n4Addr.String()].id = r.ID
					}
				case r < 9: // delete
					var err error
					if rng.IntN(2) == 0 && cur != nil {
						err = e.Delete(ctx, cur.id)
					} else {
						_, err = e.DeleteByFrontend(ctx, fe)
					}
					if cur == nil {
						if !errorsIs(err, ErrServiceNotFound) {
							errs <- fmt.Errorf("worker %d op %d: delete of absent %s: %v", w, n, fe, err)
							return
						}
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("worker %d op %d delete: %w", w, n, err)
						return
					}
					delete(model, fe.String())
				default: // get
					if cur == nil {
						continue
					}
					got, err := e.Get(ctx, cur.id)
					if err != nil || got.Frontend.L3n4Addr != fe {
						errs <- fmt.Errorf("worker %d op %d get %d: %v %v", w, n, cur.id, got, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	settle(t, e)
	// The engine, the maps and the merged model agree.
	want := map[string]*modelSvc{}
	for _, m := range models {
		for k, v := range m {
			want[k] = v
		}
	}
	list, err := e.List(ctxT(t))
	require.NoError(t, err)
	require.Len(t, list, len(want))
	require.True(t, sort.SliceIsSorted(list, func(i, j int) bool { return list[i].Frontend.ID < list[j].Frontend.ID }))
	for _, svc := range list {
		m, ok := want[svc.Frontend.L3n4Addr.String()]
		require.True(t, ok, "unexpected service %s", svc.Frontend.L3n4Addr)
		require.Equal(t, m.id, svc.Frontend.ID)
		got := map[string]lb.BackendState{}
		for _, b := range svc.Backends {
			got[b.String()] = b.State
		}
		require.Equal(t, m.backends, got, "service %s", svc.Frontend.L3n4Addr)
	}
	checkInvariants(t, e)
	st, err := e.Stats(ctxT(t))
	require.NoError(t, err)
	used := map[string]bool{}
	for _, m := range want {
		for b := range m.backends {
			used[b] = true
		}
	}
	require.Equal(t, len(used), st.Backends, "no leaked backend IDs")
	require.Zero(t, st.OpsInFlight)
	_ = slices.Sort[[]int]
}
