package actorlb

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/enginetest"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// UpsertBatch answers each service on its own: invalid ones fail alone,
// the others land in the maps exactly as single upserts would.
func TestUpsertBatchAnswersEachServiceOnItsOwn(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	var svcs []*lb.Service
	for i := range 50 {
		svcs = append(svcs, mustService(t, fmt.Sprintf("10.96.0.%d:80", i+1),
			fmt.Sprintf("10.0.1.%d:8080", i+1), "10.0.9.9:8080")) // one backend shared by all
	}
	bad := mustService(t, "10.96.1.1:80", "10.0.1.1:8080")
	bad.Backends[0].Port = 0
	batch := append(append([]*lb.Service{}, svcs[:25]...), bad, nil)
	batch = append(batch, svcs[25:]...)

	rs, err := e.UpsertBatch(ctx, batch)
	require.NoError(t, err)
	require.Len(t, rs, len(batch))
	require.ErrorContains(t, rs[25].Err, "upsert service 25 of the batch: invalid backends[0].port")
	require.ErrorContains(t, rs[26].Err, "upsert service 26 of the batch: invalid frontend")
	ids := map[lb.ServiceID]bool{}
	for i, r := range rs {
		if i == 25 || i == 26 {
			continue
		}
		require.NoError(t, r.Err, "service %d", i)
		require.True(t, r.Created)
		require.False(t, ids[r.ID], "ID %d twice", r.ID)
		ids[r.ID] = true
	}
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 50)
	checkInvariants(t, e)
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	for _, step := range []string{"wait in queue", "acquire IDs", "write backends and revNAT", "write service", "commit"} {
		require.EqualValues(t, 50, st.Steps[step].Count, "step %q", step)
		require.Positive(t, st.Steps[step].Total, "step %q", step)
	}
	sent, msgs := st.RequestsSent, st.ChildMessages

	// Again, with a backend removed from each: updates, not creations.
	for _, s := range svcs {
		s.Backends = s.Backends[:1]
	}
	rs, err = e.UpsertBatch(ctx, svcs)
	require.NoError(t, err)
	for i, r := range rs {
		require.NoError(t, r.Err, "service %d", i)
		require.False(t, r.Created)
	}
	checkInvariants(t, e)
	st, err = e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 50, st.Backends, "the shared backend is gone")
	// No frontend or backend in common now: the 50 updates ran as one op
	// (a run), one request per child and step for all of them. They make
	// nothing new (each keeps a backend it had, in its state): their
	// backends and revNAT entries went beside their services, in the one
	// write step.
	for _, step := range []string{"wait in queue", "write service", "commit"} {
		require.EqualValues(t, 51, st.Steps[step].Count, "step %q", step)
	}
	require.EqualValues(t, 50, st.Steps["write backends and revNAT"].Count, "the updates' backends went with their services")
	require.Less(t, st.RequestsSent-sent, uint64(20), "requests for the 50 updates")
	require.LessOrEqual(t, st.ChildMessages-msgs, st.RequestsSent-sent, "child messages")

	fes := []lb.L3n4Addr{svcs[0].Frontend.L3n4Addr, bad.Frontend.L3n4Addr}
	for _, s := range svcs[1:] {
		fes = append(fes, s.Frontend.L3n4Addr)
	}
	ds, err := e.DeleteBatch(ctx, fes)
	require.NoError(t, err)
	require.Len(t, ds, 51)
	require.ErrorIs(t, ds[1].Err, ErrServiceNotFound)
	for i, d := range ds {
		if i != 1 {
			require.NoError(t, d.Err, "frontend %d", i)
			require.True(t, ids[d.ID])
		}
	}
	list, err = e.List(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
	checkInvariants(t, e)
	st, err = e.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Backends)
}

// DeleteBatch runs as one operation per run of distinct frontends: IPv4
// and IPv6 together, backends shared with a service that stays are kept,
// a frontend given twice is deleted once (then not found), and a map that
// refuses the deletes leaves every service of the batch as it was.
func TestDeleteBatchMapFailureKeepsEveryServiceOfTheRun(t *testing.T) {
	e, failDeletes := engineFailingServiceMaps(t, maps.OpDelete)
	ctx := ctxT(t)
	keep := mustService(t, "10.96.9.9:80", "10.0.1.1:8080")
	a := mustService(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")
	b := mustService(t, "[fd00::1]:80", "[fd00::10]:8080")
	c := mustService(t, "10.96.0.3:80", "10.0.1.3:8080")
	rs, err := e.UpsertBatch(ctx, []*lb.Service{keep, a, b, c})
	require.NoError(t, err)
	for _, r := range rs {
		require.NoError(t, r.Err)
	}
	before, err := e.List(ctx)
	require.NoError(t, err)

	failDeletes.Store(true)
	ds, err := e.DeleteBatch(ctx, []lb.L3n4Addr{a.Frontend.L3n4Addr, b.Frontend.L3n4Addr})
	require.NoError(t, err)
	for _, d := range ds {
		require.ErrorContains(t, d.Err, "delete service")
		require.ErrorIs(t, d.Err, syscall.EBUSY)
	}
	after, err := e.List(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "a failed batch leaves its services")
	checkInvariants(t, e)

	failDeletes.Store(false)
	fes := []lb.L3n4Addr{a.Frontend.L3n4Addr, b.Frontend.L3n4Addr, a.Frontend.L3n4Addr, c.Frontend.L3n4Addr}
	ds, err = e.DeleteBatch(ctx, fes)
	require.NoError(t, err)
	require.NoError(t, ds[0].Err)
	require.NoError(t, ds[1].Err)
	require.ErrorIs(t, ds[2].Err, ErrServiceNotFound, "deleted by the first run")
	require.NoError(t, ds[3].Err)
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, keep.Frontend.L3n4Addr, list[0].Frontend.L3n4Addr)
	checkInvariants(t, e)
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Backends, "the shared backend stays, the others are gone")
	be, err := e.maps.Backend4.Dump()
	require.NoError(t, err)
	require.Len(t, be, 1)
	be6, err := e.maps.Backend6.Dump()
	require.NoError(t, err)
	require.Empty(t, be6)
	rev, err := e.RevNATDump(ctx)
	require.NoError(t, err)
	require.Len(t, rev, 1)

	// The IDs are free again.
	rs, err = e.UpsertBatch(ctx, []*lb.Service{a, b})
	require.NoError(t, err)
	for _, r := range rs {
		require.NoError(t, r.Err)
		require.True(t, r.Created)
	}
	checkInvariants(t, e)
}

// New services of an UpsertBatch go as one operation: an ID the allocator
// refuses fails that service alone, a shared backend's new state reaches
// the service that had it, and a service map that refuses the writes rolls
// back every service of the run (shared state restored, IDs free again).
func TestUpsertBatchMapFailureRollsBackTheRun(t *testing.T) {
	e, failWrites := engineFailingServiceMaps(t, maps.OpUpdate)
	ctx := ctxT(t)
	old := mustService(t, "10.96.9.9:80", "10.0.1.1:8080")
	oldID, _, err := e.Upsert(ctx, old)
	require.NoError(t, err)
	before, err := e.List(ctx)
	require.NoError(t, err)
	mapsBefore := dumpAll(t, e)

	a := mustService(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")
	a.Backends[0].State = lb.BackendStateQuarantined // shared with old
	b := mustService(t, "[fd00::1]:80", "[fd00::10]:8080")
	c := mustService(t, "10.96.0.3:80", "10.0.1.3:8080")
	c.Frontend.ID = oldID // taken
	d := mustService(t, "10.96.0.4:80", "10.0.1.4:8080")
	d.Frontend.ID = 700
	dup := mustService(t, "10.96.0.5:80", "10.0.1.5:8080")
	dup.Frontend.ID = 700 // taken by d first
	batch := []*lb.Service{a, b, c, d, dup}

	failWrites.Store(true)
	rs, err := e.UpsertBatch(ctx, batch)
	require.NoError(t, err)
	require.ErrorIs(t, rs[2].Err, ErrServiceIDInUse)
	require.ErrorIs(t, rs[4].Err, ErrServiceIDInUse)
	for _, i := range []int{0, 1, 3} {
		require.ErrorIs(t, rs[i].Err, syscall.EBUSY, "service %d", i)
	}
	after, err := e.List(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "the run was rolled back")
	require.Equal(t, mapsBefore, dumpAll(t, e), "maps as before, shared backend state included")
	checkInvariants(t, e)

	failWrites.Store(false)
	rs, err = e.UpsertBatch(ctx, batch)
	require.NoError(t, err)
	require.ErrorIs(t, rs[2].Err, ErrServiceIDInUse)
	require.ErrorIs(t, rs[4].Err, ErrServiceIDInUse)
	for _, i := range []int{0, 1, 3} {
		require.NoError(t, rs[i].Err, "service %d", i)
		require.True(t, rs[i].Created)
	}
	require.Equal(t, lb.ServiceID(700), rs[3].ID)
	got, err := e.Get(ctx, oldID)
	require.NoError(t, err)
	require.Equal(t, lb.BackendStateQuarantined, got.Backends[0].State, "the shared backend's state reached the old service")
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 4)
	checkInvariants(t, e)
}

// Updates of existing services in one UpsertBatch go as one run with the
// new services beside them (no frontend or new backend in common), with
// what one update does to another's backends as separate calls would: a
// backend one update drops and another takes stays bound, one two
// updates drop is freed once, a shared backend's new state reaches the
// service outside the batch. A map that refuses the run's writes rolls
// every service of it back, the maps as they were.
func TestUpsertBatchRunsUpdatesTogetherAndRollsThemBackTogether(t *testing.T) {
	e, failWrites := engineFailingServiceMaps(t, maps.OpUpdate)
	ctx := ctxT(t)
	be := func(i int) string { return fmt.Sprintf("10.0.1.%d:8080", i) }
	existing := []*lb.Service{
		mustService(t, "10.96.0.1:80", be(1), be(2)), // drops 2, takes 8 (fresh)
		mustService(t, "10.96.0.2:80", be(3)),        // takes 2
		mustService(t, "10.96.0.3:80", be(9), be(4)), // drops 9
		mustService(t, "10.96.0.4:80", be(9), be(5)), // drops 9
		mustService(t, "10.96.0.5:80", be(6)),        // 6 quarantined
		mustService(t, "10.96.0.6:80", be(6), be(7)), // not in the batch
		mustService(t, "[fd00::1]:80", "[fd00::10]:8080"),
	}
	ids := map[string]lb.ServiceID{}
	for _, s := range existing {
		id, _, err := e.Upsert(ctx, s)
		require.NoError(t, err)
		ids[s.Frontend.L3n4Addr.String()] = id
	}
	quarantined := mustService(t, "10.96.0.5:80", be(6))
	quarantined.Backends[0].State = lb.BackendStateQuarantined
	batch := []*lb.Service{
		mustService(t, "10.96.0.1:80", be(1), be(8)),
		mustService(t, "10.96.0.2:80", be(3), be(2)),
		mustService(t, "10.96.0.3:80", be(4)),
		mustService(t, "10.96.0.4:80", be(5)),
		quarantined,
		mustService(t, "[fd00::1]:80", "[fd00::10]:8080", "[fd00::11]:8080"),
		mustService(t, "10.96.0.10:80", be(20)), // new
	}
	before, err := e.List(ctx)
	require.NoError(t, err)
	mapsBefore := dumpAll(t, e)
	st0, err := e.Stats(ctx)
	require.NoError(t, err)

	failWrites.Store(true)
	rs, err := e.UpsertBatch(ctx, batch)
	require.NoError(t, err)
	for i, r := range rs {
		require.ErrorIs(t, r.Err, syscall.EBUSY, "service %d", i)
	}
	after, err := e.List(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "the run was rolled back")
	require.Equal(t, mapsBefore, dumpAll(t, e), "maps as before, the shared backend's state included")
	checkInvariants(t, e)
	st1, err := e.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st1.Steps["write service"].Count-st0.Steps["write service"].Count, "the seven services as one op")

	failWrites.Store(false)
	rs, err = e.UpsertBatch(ctx, batch)
	require.NoError(t, err)
	for i, r := range rs {
		require.NoError(t, r.Err, "service %d", i)
		require.Equal(t, i == len(batch)-1, r.Created, "service %d", i)
		if !r.Created {
			require.Equal(t, ids[batch[i].Frontend.L3n4Addr.String()], r.ID, "service %d", i)
		}
	}
	st2, err := e.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st2.Steps["commit"].Count-st1.Steps["commit"].Count, "the seven services as one op")
	// 1, 8, 3, 2, 4, 5, 6, 7, 20 and two IPv6: 9 dropped by both, freed.
	require.Equal(t, 11, st2.Backends)
	outside, err := e.Get(ctx, ids[existing[5].Frontend.L3n4Addr.String()])
	require.NoError(t, err)
	require.Contains(t, outside.Backends, quarantined.Backends[0], "the shared backend's state reached the service outside the batch")
	for i, want := range batch[:len(batch)-1] {
		got, err := e.Get(ctx, rs[i].ID)
		require.NoError(t, err)
		require.ElementsMatch(t, want.Backends, got.Backends, "service %d", i)
	}
	checkInvariants(t, e)
}

// A terminating backend that an earlier service of an UpsertBatch drops
// may come back, in another state, in a later one, as when the two are
// upserted one by one (the first leaves it free); one that a service
// outside the call still uses may not, nor one the earlier service keeps.
func TestUpsertBatchTakesABackendAnEarlierServiceDropsAsIfOneByOne(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	terminating := func(s *lb.Service, i int) *lb.Service {
		s.Backends[i].State = lb.BackendStateTerminating
		return s
	}
	for _, s := range []*lb.Service{
		terminating(mustService(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"), 1),
		terminating(mustService(t, "10.96.0.3:80", "10.0.1.3:8080", "10.0.1.4:8080"), 1),
		terminating(mustService(t, "10.96.0.4:80", "10.0.1.4:8080", "10.0.1.5:8080"), 0),
	} {
		_, _, err := e.Upsert(ctx, s)
		require.NoError(t, err)
	}

	// 10.0.1.2 is 10.96.0.1's alone: dropped first, then taken active.
	rs, err := e.UpsertBatch(ctx, []*lb.Service{
		mustService(t, "10.96.0.1:80", "10.0.1.1:8080"),
		mustService(t, "10.96.0.2:80", "10.0.1.2:8080"),
	})
	require.NoError(t, err)
	require.NoError(t, rs[0].Err)
	require.NoError(t, rs[1].Err)
	got, err := e.Get(ctx, rs[1].ID)
	require.NoError(t, err)
	require.Equal(t, lb.BackendStateActive, got.Backends[0].State)
	checkInvariants(t, e)

	// 10.0.1.4 is also 10.96.0.4's, which the batch leaves alone; and a
	// batch whose earlier service keeps it: refused both times.
	for _, first := range []*lb.Service{
		mustService(t, "10.96.0.3:80", "10.0.1.3:8080"),
		terminating(mustService(t, "10.96.0.4:80", "10.0.1.4:8080", "10.0.1.5:8080"), 0),
	} {
		rs, err = e.UpsertBatch(ctx, []*lb.Service{first, mustService(t, "10.96.0.5:80", "10.0.1.4:8080")})
		require.NoError(t, err)
		require.NoError(t, rs[0].Err)
		require.ErrorContains(t, rs[1].Err, "terminating is final")
	}
	checkInvariants(t, e)
}

// A frontend given twice in one UpsertBatch: created by the first, updated
// by the second, in that order (the second waits behind the run).
func TestUpsertBatchSameFrontendTwice(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	first := mustService(t, "10.96.0.1:80", "10.0.1.1:8080")
	other := mustService(t, "10.96.0.2:80", "10.0.1.2:8080")
	second := mustService(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.3:8080")
	rs, err := e.UpsertBatch(ctx, []*lb.Service{first, other, second})
	require.NoError(t, err)
	for _, r := range rs {
		require.NoError(t, r.Err)
	}
	require.True(t, rs[0].Created)
	require.True(t, rs[1].Created)
	require.False(t, rs[2].Created, "the second is an update")
	require.Equal(t, rs[0].ID, rs[2].ID)
	got, err := e.Get(ctx, rs[0].ID)
	require.NoError(t, err)
	require.Len(t, got.Backends, 2)
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	checkInvariants(t, e)
}

// A batch that does not fit the service map creates the services that
// fit and fails only the rest, each with a full-map error naming the map
// and the flag to raise it; nothing of a failed service is left behind.
func TestUpsertBatchIntoANearlyFullMapCreatesWhatFits(t *testing.T) {
	e := newEngine(t, "", Config{MaxEntries: maps.Sizes{Services: 15}})
	ctx := ctxT(t)
	var svcs []*lb.Service
	for i := range 10 {
		svcs = append(svcs, mustService(t, fmt.Sprintf("10.96.0.%d:80", i+1), fmt.Sprintf("10.0.1.%d:8080", i+1)))
	}
	rs, err := e.UpsertBatch(ctx, svcs)
	require.NoError(t, err)
	created := 0
	for _, r := range rs {
		if r.Err == nil {
			created++
			continue
		}
		require.ErrorIs(t, r.Err, ErrMapFull)
		require.ErrorContains(t, r.Err, "update lb4_services: map full")
		require.ErrorContains(t, r.Err, "raise its size, agent --map-max")
	}
	require.Equal(t, 7, created, "2 entries per service in a map of 15") // master + one slot each
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, created)
	d := dumpMaps(t, e)
	require.Len(t, d.Services4, 2*created)
	require.Len(t, d.Backends4, created, "no backend of a failed service is left")
	require.Len(t, d.RevNAT4, created)
}

// A batch and a sync of many new services into an empty engine (the first
// sync of a cluster) size the indexes they fill at once: the services,
// their backends (some shared) and IDs come out as with small batches, the
// invariants hold, and deleting them all leaves nothing. Real maps when
// privileged (newEngine).
func TestLargeFirstBatchAndSyncCreateEveryService(t *testing.T) {
	for _, how := range []string{"batch", "sync"} {
		t.Run(how, func(t *testing.T) {
			e := newEngine(t, "", Config{})
			ctx := ctxT(t)
			const n = 1500 // above the size from which the engine sizes its indexes
			svcs := make([]*lb.Service, n)
			for i := range svcs {
				svcs[i] = mustService(t, fmt.Sprintf("10.96.%d.%d:80", i/250, 1+i%250),
					fmt.Sprintf("10.1.%d.%d:8080", i/250, 1+i%250), fmt.Sprintf("10.2.0.%d:8080", 1+i%50)) // the second backend shared by 30 services
			}
			if how == "batch" {
				rs, err := e.UpsertBatch(ctx, svcs)
				require.NoError(t, err)
				for i, r := range rs {
					require.NoError(t, r.Err, "service %d", i)
					require.True(t, r.Created, "service %d", i)
				}
			} else {
				res, err := e.Sync(ctx, svcs)
				require.NoError(t, err)
				require.Equal(t, n, res.Upserted)
			}
			st, err := e.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, n, st.Services)
			require.Equal(t, n+50, st.Backends)
			checkInvariants(t, e)
			fes := make([]lb.L3n4Addr, n)
			for i, s := range svcs {
				fes[i] = s.Frontend.L3n4Addr
			}
			ds, err := e.DeleteBatch(ctx, fes)
			require.NoError(t, err)
			for i, d := range ds {
				require.NoError(t, d.Err, "service %d", i)
			}
			st, err = e.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, st.Services)
			require.Zero(t, st.Backends)
			checkInvariants(t, e)
		})
	}
}

// A two-scope service and a service at its internal-scope frontend in one
// batch are two operations, the second refused: in one they would queue
// at the same frontend twice, and the batch would wait behind itself.
func TestUpsertBatchOfTwoScopeServiceAndItsInternalFrontendAnswers(t *testing.T) {
	e := newEngine(t, "", Config{})
	two := mustService(t, "10.96.0.1:80", "10.0.1.1:8080")
	two.Type = lb.SVCTypeNodePort
	two.ExtTrafficPolicyLocal = true
	internal := mustService(t, "10.96.0.1:80", "10.0.1.2:8080")
	internal.Type = lb.SVCTypeNodePort
	internal.Frontend.Scope = lb.ScopeInternal
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()
	rs, err := e.UpsertBatch(ctx, []*lb.Service{two, internal})
	require.NoError(t, err)
	require.NoError(t, rs[0].Err)
	require.Error(t, rs[1].Err, "its external frontend is a two-scope service")
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Empty(t, verify.Check(dumpMaps(t, e)))
}

// engineFailingServiceMaps returns an engine whose service maps refuse
// every op of kind op (EBUSY) while the returned switch is on.
func engineFailingServiceMaps(t *testing.T, op maps.Op) (*Engine, *atomic.Bool) {
	t.Helper()
	var failing atomic.Bool
	e := newEngine(t, "", Config{hooks: enginetest.Hooks{Fault: func(name string, o maps.Op, n uint64, entries int) error {
		if failing.Load() && o == op && (name == maps.Service4Name || name == maps.Service6Name) {
			return syscall.EBUSY
		}
		return nil
	}}})
	return e, &failing
}
