package actors

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/engine"
	"github.com/actorlb/actorlb/internal/idalloc"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// The allocator needs no map: these tests drive its handler directly
// (one test goes through an actor system for the restart's queue).

func newTestAllocator(t *testing.T) *allocatorActor {
	t.Helper()
	return newAllocatorProducer()().(*allocatorActor)
}

// frontend and backend return the i-th test address of each kind.
func frontend(i int) lb.L3n4Addr {
	return lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80, Protocol: lb.TCP}
}

func backend(i int) lb.L3n4Addr {
	return lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Port: 8080, Protocol: lb.TCP}
}

func (a *allocatorActor) mustLease(t *testing.T, svcs, bes int) *messages.AllocLeased {
	t.Helper()
	r := a.handle(&messages.AllocLease{Services: svcs, Backends: bes}).(*messages.AllocLeased)
	require.NoError(t, r.Err)
	return r
}

func (a *allocatorActor) doBind(m *messages.AllocBind) error {
	return a.handle(m).(*messages.AllocDone).Err
}

func (a *allocatorActor) doAcquire(m *messages.AllocAcquire) *messages.AllocAcquired {
	return a.handle(m).(*messages.AllocAcquired)
}

// requireBackend checks that backend k is bound to id with refs references.
func (a *allocatorActor) requireBackend(t *testing.T, k lb.L3n4Addr, id lb.BackendID, refs uint32) {
	t.Helper()
	got, n, ok := a.be.Lookup(addrkey.BackendOf(k))
	require.True(t, ok, "backend %s is not bound", k)
	require.Equal(t, id, got, "backend %s", k)
	require.Equal(t, refs, n, "references of backend %s", k)
}

// requireFree checks that the backend IDs are neither bound, held nor
// leased, and the same for the service IDs.
func (a *allocatorActor) requireFree(t *testing.T, svcs []lb.ServiceID, bes []lb.BackendID) {
	t.Helper()
	for _, id := range svcs {
		_, bound := a.svc.LookupID(id)
		require.False(t, bound || a.svc.Held(id) || has(a.leasedSvcs, id), "service ID %d: bound %t, held %t, leased %t",
			id, bound, a.svc.Held(id), has(a.leasedSvcs, id))
	}
	for _, id := range bes {
		_, bound := a.be.LookupID(id)
		require.False(t, bound || a.be.Held(id) || has(a.leasedBes, id), "backend ID %d: bound %t, held %t, leased %t",
			id, bound, a.be.Held(id), has(a.leasedBes, id))
	}
}

// requireLeased checks that the IDs are leased: held and owned by nobody.
func (a *allocatorActor) requireLeased(t *testing.T, svcs []lb.ServiceID, bes []lb.BackendID) {
	t.Helper()
	for _, id := range svcs {
		_, bound := a.svc.LookupID(id)
		require.True(t, !bound && a.svc.Held(id) && has(a.leasedSvcs, id), "service ID %d is not leased", id)
	}
	for _, id := range bes {
		_, bound := a.be.LookupID(id)
		require.True(t, !bound && a.be.Held(id) && has(a.leasedBes, id), "backend ID %d is not leased", id)
	}
}

func has[I idalloc.ID](l lease[I], id I) bool {
	_, ok := l[id]
	return ok
}

// allocState is what the allocator knows, for tests that check a request
// changed nothing (held IDs among the first 64).
type allocState struct {
	svcs              []idalloc.Binding[lb.L3n4Addr, lb.ServiceID]
	bes               []idalloc.Binding[addrkey.Backend, lb.BackendID]
	leasedS           []lb.ServiceID
	leasedB           []lb.BackendID
	heldSvcs, heldBes []int
}

func (a *allocatorActor) state() allocState {
	s := allocState{
		svcs:    a.svc.Bindings(),
		bes:     a.be.Bindings(),
		leasedS: slices.Sorted(maps.Keys(a.leasedSvcs)),
		leasedB: slices.Sorted(maps.Keys(a.leasedBes)),
	}
	for i := 1; i <= 64; i++ {
		if a.svc.Held(lb.ServiceID(i)) {
			s.heldSvcs = append(s.heldSvcs, i)
		}
		if a.be.Held(lb.BackendID(i)) {
			s.heldBes = append(s.heldBes, i)
		}
	}
	return s
}

// A bind takes the leased service ID and backend IDs and a reference on a
// backend already bound; a later release frees them as any acquired ID.
func TestAllocatorBindsLeasedIDs(t *testing.T) {
	a := newTestAllocator(t)
	old := a.doAcquire(&messages.AllocAcquire{Backends: []lb.L3n4Addr{backend(0)}})
	require.NoError(t, old.Err)
	require.Equal(t, []lb.BackendID{1}, old.BackendIDs)

	l := a.mustLease(t, 2, 3)
	require.Equal(t, []lb.ServiceID{1, 2}, l.ServiceIDs)
	require.Equal(t, []lb.BackendID{2, 3, 4}, l.BackendIDs, "the leased IDs are free ones")
	a.requireLeased(t, l.ServiceIDs, l.BackendIDs)

	require.NoError(t, a.doBind(&messages.AllocBind{
		Frontend: frontend(1), ServiceID: 2,
		Backends: []lb.L3n4Addr{backend(1), backend(0), backend(2)}, BackendIDs: []lb.BackendID{3, 1, 2},
	}))
	id, refs, ok := a.svc.Lookup(frontend(1))
	require.True(t, ok)
	require.Equal(t, lb.ServiceID(2), id)
	require.Equal(t, uint32(1), refs)
	a.requireBackend(t, backend(1), 3, 1)
	a.requireBackend(t, backend(0), 1, 2)
	a.requireBackend(t, backend(2), 2, 1)
	a.requireLeased(t, []lb.ServiceID{1}, []lb.BackendID{4})
	require.Len(t, a.leasedSvcs, 1, "the bound IDs left the lease")
	require.Len(t, a.leasedBes, 1, "the bound IDs left the lease")

	// An acquire gets neither the leased IDs nor the bound ones.
	acq := a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(2), Backends: []lb.L3n4Addr{backend(3)}})
	require.NoError(t, acq.Err)
	require.Equal(t, lb.ServiceID(3), acq.ServiceID)
	require.Equal(t, []lb.BackendID{5}, acq.BackendIDs)

	rel := a.handle(&messages.AllocRelease{
		Backends: []lb.L3n4Addr{backend(1), backend(0), backend(2)}, Frontends: []lb.L3n4Addr{frontend(1)},
	}).(*messages.AllocReleased)
	require.NoError(t, rel.Err)
	require.Equal(t, []lb.BackendID{3, 2}, rel.FreedBackends)
	a.requireBackend(t, backend(0), 1, 1)
	_, _, ok = a.svc.Lookup(frontend(1))
	require.False(t, ok)
	require.True(t, a.be.Held(3), "a freed backend ID is held until AllocUnhold")
	require.Nil(t, a.handle(&messages.AllocUnhold{BackendIDs: rel.FreedBackends}).(*messages.AllocDone).Err)
	a.requireFree(t, []lb.ServiceID{2}, []lb.BackendID{2, 3})
	a.requireLeased(t, []lb.ServiceID{1}, []lb.BackendID{4})
}

// A bind naming an ID that is not leased fails and changes nothing.
func TestAllocatorBindOfUnleasedIDFailsAndChangesNothing(t *testing.T) {
	a := newTestAllocator(t)
	acq := a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(1), Backends: []lb.L3n4Addr{backend(1)}})
	require.NoError(t, acq.Err)
	a.mustLease(t, 2, 2) // services 2, 3; backends 2, 3
	require.NoError(t, a.handle(&messages.AllocRelease{Backends: []lb.L3n4Addr{backend(1)}}).(*messages.AllocReleased).Err)
	before := a.state()
	require.Equal(t, []int{1, 2, 3}, before.heldBes, "backend 1 freed (held), 2 and 3 leased")

	for _, tc := range []struct {
		name string
		bind messages.AllocBind
		err  string
	}{
		{name: "free service ID", bind: messages.AllocBind{Frontend: frontend(2), ServiceID: 9},
			err: "bind service ID 9 for 10.96.0.2:80/TCP: not leased"},
		{name: "bound service ID", bind: messages.AllocBind{Frontend: frontend(2), ServiceID: 1},
			err: "bind service ID 1 for 10.96.0.2:80/TCP: not leased"},
		{name: "held backend ID", bind: messages.AllocBind{Backends: []lb.L3n4Addr{backend(2)}, BackendIDs: []lb.BackendID{1}},
			err: "bind backend 10.0.0.2:8080/TCP to ID 1: not leased"},
		{name: "free backend ID", bind: messages.AllocBind{Backends: []lb.L3n4Addr{backend(2)}, BackendIDs: []lb.BackendID{7}},
			err: "bind backend 10.0.0.2:8080/TCP to ID 7: not leased"},
		{name: "zero backend ID", bind: messages.AllocBind{Backends: []lb.L3n4Addr{backend(2)}, BackendIDs: []lb.BackendID{0}},
			err: "bind backend 10.0.0.2:8080/TCP to ID 0: not leased"},
		{name: "fewer IDs than backends", bind: messages.AllocBind{Backends: []lb.L3n4Addr{backend(2)}},
			err: "bind: 0 backend IDs for 1 backends"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.doBind(&tc.bind)
			require.EqualError(t, err, tc.err)
			require.Equal(t, before, a.state())
		})
	}
}

// A bind that fails undoes what it did, and the leased IDs it named are
// free: the supervisor forgot them. The IDs it did not name stay leased.
func TestAllocatorFailedBindFreesItsLeasedIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		bind messages.AllocBind
		err  string
		is   error
	}{
		{
			name: "a backend ID not leased, after the others are bound",
			bind: messages.AllocBind{Frontend: frontend(1), ServiceID: 2,
				Backends:   []lb.L3n4Addr{backend(1), backend(0), backend(1), backend(2)},
				BackendIDs: []lb.BackendID{2, 1, 2, 99}},
			err: "bind backend 10.0.0.2:8080/TCP to ID 99: not leased",
		},
		{
			name: "a bound backend named with another ID",
			bind: messages.AllocBind{Frontend: frontend(1), ServiceID: 2,
				Backends: []lb.L3n4Addr{backend(1), backend(0)}, BackendIDs: []lb.BackendID{2, 3}},
			err: "bind backend 10.0.0.0:8080/TCP to ID 3: the backend is already registered with ID 1",
		},
		{
			name: "one leased ID for two backends",
			bind: messages.AllocBind{Frontend: frontend(1), ServiceID: 2,
				Backends: []lb.L3n4Addr{backend(1), backend(2)}, BackendIDs: []lb.BackendID{2, 2}},
			err: "bind backend 10.0.0.2:8080/TCP to ID 2: id 2 is bound to 10.0.0.1:8080/TCP",
			is:  idalloc.ErrIDInUse,
		},
		{
			name: "the frontend already has an ID",
			bind: messages.AllocBind{Frontend: frontend(0), ServiceID: 2,
				Backends: []lb.L3n4Addr{backend(1)}, BackendIDs: []lb.BackendID{2}},
			err: "frontend in use: frontend 10.96.0.0:80/TCP is already registered with ID 1",
			is:  engine.ErrFrontendInUse,
		},
		{
			name: "more IDs than backends",
			bind: messages.AllocBind{Frontend: frontend(1), ServiceID: 2,
				Backends: []lb.L3n4Addr{backend(1)}, BackendIDs: []lb.BackendID{2, 3}},
			err: "bind: 2 backend IDs for 1 backends",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAllocator(t)
			acq := a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(0), Backends: []lb.L3n4Addr{backend(0)}})
			require.NoError(t, acq.Err)
			l := a.mustLease(t, 2, 3)
			require.Equal(t, []lb.ServiceID{2, 3}, l.ServiceIDs)
			require.Equal(t, []lb.BackendID{2, 3, 4}, l.BackendIDs)

			err := a.doBind(&tc.bind)
			require.EqualError(t, err, tc.err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			// Undone: only the first acquire's bindings are left.
			require.Equal(t, []idalloc.Binding[lb.L3n4Addr, lb.ServiceID]{{Key: frontend(0), ID: 1, Refs: 1}}, a.svc.Bindings())
			require.Equal(t, []idalloc.Binding[addrkey.Backend, lb.BackendID]{{Key: addrkey.BackendOf(backend(0)), ID: 1, Refs: 1}},
				a.be.Bindings())
			// The named leased IDs are free, the others still leased.
			named := []lb.BackendID{2}
			if slices.Contains(tc.bind.BackendIDs, 3) {
				named = append(named, 3)
			}
			a.requireFree(t, []lb.ServiceID{2}, named)
			a.requireLeased(t, []lb.ServiceID{3}, slices.DeleteFunc([]lb.BackendID{3, 4}, func(id lb.BackendID) bool {
				return slices.Contains(named, id)
			}))
			// A later acquire can have the freed service ID.
			got := a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(5), WantID: 2})
			require.NoError(t, got.Err)
			require.Equal(t, lb.ServiceID(2), got.ServiceID)
		})
	}
}

// An acquire with a leased service ID binds the frontend to it; the ID
// leaves the lease, and is free if the acquire fails.
func TestAllocatorAcquireWithLeasedID(t *testing.T) {
	t.Run("success", func(t *testing.T) {
		a := newTestAllocator(t)
		l := a.mustLease(t, 2, 0)
		r := a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(1), LeasedID: 2, Backends: []lb.L3n4Addr{backend(1)}})
		require.NoError(t, r.Err)
		require.Equal(t, lb.ServiceID(2), r.ServiceID)
		require.Equal(t, []lb.BackendID{1}, r.BackendIDs)
		id, refs, ok := a.svc.Lookup(frontend(1))
		require.True(t, ok)
		require.Equal(t, lb.ServiceID(2), id)
		require.Equal(t, uint32(1), refs)
		require.False(t, a.svc.Held(2))
		require.NotContains(t, a.leasedSvcs, lb.ServiceID(2))
		a.requireLeased(t, l.ServiceIDs[:1], nil)
		// WantID equal to LeasedID is allowed.
		r = a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(2), WantID: 1, LeasedID: 1})
		require.NoError(t, r.Err)
		require.Equal(t, lb.ServiceID(1), r.ServiceID)
		require.Empty(t, a.leasedSvcs)
	})

	for _, tc := range []struct {
		name    string
		acquire messages.AllocAcquire
		setup   func(t *testing.T, a *allocatorActor)
		err     string
		is      error
	}{
		{
			name:    "not leased",
			acquire: messages.AllocAcquire{Service: true, Frontend: frontend(1), LeasedID: 7},
			err:     "acquire service ID 7 for 10.96.0.1:80/TCP: not leased",
		},
		{
			name:    "the frontend already has an ID",
			acquire: messages.AllocAcquire{Service: true, Frontend: frontend(0), LeasedID: 2},
			err:     "frontend in use: frontend 10.96.0.0:80/TCP is already registered with ID 1",
			is:      engine.ErrFrontendInUse,
		},
		{
			name:    "another WantID",
			acquire: messages.AllocAcquire{Service: true, Frontend: frontend(1), WantID: 3, LeasedID: 2},
			err:     "acquire service ID for 10.96.0.1:80/TCP: leased ID 2 needs Service set and WantID 0 or 2 (service true, WantID 3)",
		},
		{
			name:    "no service",
			acquire: messages.AllocAcquire{Frontend: frontend(1), LeasedID: 2},
			err:     "acquire service ID for 10.96.0.1:80/TCP: leased ID 2 needs Service set and WantID 0 or 2 (service false, WantID 0)",
		},
		{
			name:    "a backend acquire fails",
			acquire: messages.AllocAcquire{Service: true, Frontend: frontend(1), LeasedID: 2, Backends: []lb.L3n4Addr{backend(0), backend(1)}},
			setup: func(t *testing.T, a *allocatorActor) {
				// A space of one backend ID, taken by backend 0.
				a.be = idalloc.New[addrkey.Backend, lb.BackendID](1)
				_, _, err := a.be.Acquire(addrkey.BackendOf(backend(0)))
				require.NoError(t, err)
			},
			err: "acquire backend ID for 10.0.0.1:8080/TCP: id space exhausted: all 1 ids are bound, reserved or held (0 held)",
			is:  idalloc.ErrIDSpaceExhausted,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAllocator(t)
			require.NoError(t, a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(0)}).Err)
			require.Equal(t, []lb.ServiceID{2, 3}, a.mustLease(t, 2, 0).ServiceIDs)
			if tc.setup != nil {
				tc.setup(t, a)
			}
			beBefore := a.be.Bindings()
			r := a.doAcquire(&tc.acquire)
			require.EqualError(t, r.Err, tc.err)
			if tc.is != nil {
				require.ErrorIs(t, r.Err, tc.is)
			}
			require.Nil(t, r.BackendIDs)
			require.Equal(t, []idalloc.Binding[lb.L3n4Addr, lb.ServiceID]{{Key: frontend(0), ID: 1, Refs: 1}}, a.svc.Bindings())
			require.Equal(t, beBefore, a.be.Bindings())
			if tc.acquire.LeasedID == 2 {
				a.requireFree(t, []lb.ServiceID{2}, nil)
			}
			a.requireLeased(t, []lb.ServiceID{3}, nil)
		})
	}
}

// A reservation of a leased ID takes it out of the lease: reserved, or
// free when the reservation fails.
func TestAllocatorReserveOfLeasedID(t *testing.T) {
	a := newTestAllocator(t)
	require.Equal(t, []lb.ServiceID{1, 2, 3}, a.mustLease(t, 3, 0).ServiceIDs)

	done := a.handle(&messages.AllocReserve{Key: frontend(1), ID: 1, Leased: true}).(*messages.AllocDone)
	require.NoError(t, done.Err)
	id, refs, ok := a.svc.Lookup(frontend(1))
	require.True(t, ok)
	require.Equal(t, lb.ServiceID(1), id)
	require.Zero(t, refs, "reserved, not claimed")
	require.NotContains(t, a.leasedSvcs, lb.ServiceID(1))

	// frontend 1 already has ID 1: the reservation fails and ID 2 is free.
	done = a.handle(&messages.AllocReserve{Key: frontend(1), ID: 2, Leased: true}).(*messages.AllocDone)
	require.ErrorIs(t, done.Err, engine.ErrServiceIDInUse)
	require.ErrorContains(t, done.Err, "service ID 2")
	a.requireFree(t, []lb.ServiceID{2}, nil)

	// Not leased: fails, changes nothing.
	before := a.state()
	done = a.handle(&messages.AllocReserve{Key: frontend(2), ID: 2, Leased: true}).(*messages.AllocDone)
	require.EqualError(t, done.Err, "reserve service ID 2 for 10.96.0.2:80/TCP: not leased")
	require.Equal(t, before, a.state())
	a.requireLeased(t, []lb.ServiceID{3}, nil)

	// Without Leased a leased ID is held: refused, still leased.
	done = a.handle(&messages.AllocReserve{Key: frontend(2), ID: 3}).(*messages.AllocDone)
	require.ErrorIs(t, done.Err, engine.ErrServiceIDInUse)
	a.requireLeased(t, []lb.ServiceID{3}, nil)
}

// A restore holds the leased IDs it lists: acquires skip them and a bind
// can use them.
func TestAllocatorRestoreKeepsTheLease(t *testing.T) {
	a := newTestAllocator(t)
	a.mustLease(t, 5, 5) // replaced by the restore
	done := a.handle(&messages.AllocRestore{
		Services:       []messages.AllocBinding{{Key: frontend(0), ID: 1, Refs: 1}},
		Backends:       []messages.AllocBinding{{Key: backend(0), ID: 2, Refs: 1}},
		Held:           []lb.BackendID{4},
		LeasedServices: []lb.ServiceID{2, 3},
		LeasedBackends: []lb.BackendID{1, 5},
	}).(*messages.AllocDone)
	require.NoError(t, done.Err)
	a.requireLeased(t, []lb.ServiceID{2, 3}, []lb.BackendID{1, 5})
	require.Len(t, a.leasedSvcs, 2)
	require.Len(t, a.leasedBes, 2)
	a.requireFree(t, []lb.ServiceID{4, 5}, []lb.BackendID{3})

	r := a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(1), Backends: []lb.L3n4Addr{backend(1), backend(2)}})
	require.NoError(t, r.Err)
	require.Equal(t, lb.ServiceID(4), r.ServiceID, "1 bound, 2 and 3 leased")
	require.Equal(t, []lb.BackendID{3, 6}, r.BackendIDs, "1 and 5 leased, 2 bound, 4 held")

	require.NoError(t, a.doBind(&messages.AllocBind{Frontend: frontend(2), ServiceID: 3,
		Backends: []lb.L3n4Addr{backend(3), backend(0)}, BackendIDs: []lb.BackendID{5, 2}}))
	a.requireBackend(t, backend(3), 5, 1)
	a.requireBackend(t, backend(0), 2, 2)
	a.requireLeased(t, []lb.ServiceID{2}, []lb.BackendID{1})

	// A leased ID the snapshot also binds is refused, by name.
	done = a.handle(&messages.AllocRestore{
		Services:       []messages.AllocBinding{{Key: frontend(0), ID: 1, Refs: 1}},
		LeasedServices: []lb.ServiceID{1, 2},
		LeasedBackends: []lb.BackendID{0},
	}).(*messages.AllocDone)
	require.ErrorIs(t, done.Err, idalloc.ErrIDInUse)
	require.ErrorIs(t, done.Err, idalloc.ErrIDOutOfRange)
	require.ErrorContains(t, done.Err, "restore: lease service ID 1: id 1 is bound to 10.96.0.0:80/TCP")
	require.ErrorContains(t, done.Err, "restore: lease backend ID 0: id out of range")
	a.requireLeased(t, []lb.ServiceID{2}, nil)
	require.Len(t, a.leasedSvcs, 1)
	require.Empty(t, a.leasedBes)
}

// AllocUnhold of a leased ID gives it back; a negative count is refused;
// a lease keeps a quarter of a space for acquires and at most maxLeased.
func TestAllocatorLeaseBounds(t *testing.T) {
	a := newTestAllocator(t)
	l := a.mustLease(t, 2, 2)
	require.NoError(t, a.handle(&messages.AllocUnhold{ServiceIDs: l.ServiceIDs[:1], BackendIDs: l.BackendIDs[1:]}).(*messages.AllocDone).Err)
	a.requireFree(t, l.ServiceIDs[:1], l.BackendIDs[1:])
	a.requireLeased(t, l.ServiceIDs[1:], l.BackendIDs[:1])

	before := a.state()
	r := a.handle(&messages.AllocLease{Services: -1, Backends: 3}).(*messages.AllocLeased)
	require.EqualError(t, r.Err, "lease: services -1, backends 3: counts must not be negative")
	require.Empty(t, r.ServiceIDs)
	require.Empty(t, r.BackendIDs)
	require.Equal(t, before, a.state())

	r = a.mustLease(t, maxLeased+10, maxLeased+10)
	require.Len(t, r.ServiceIDs, maxLeased-1, "one was leased already")
	require.Len(t, r.BackendIDs, maxLeased-1)
	r = a.mustLease(t, 1, 1)
	require.Empty(t, r.ServiceIDs)
	require.Empty(t, r.BackendIDs)

	// A service space of 8 keeps 2 IDs out of the lease.
	a = newTestAllocator(t)
	a.svc = idalloc.New[lb.L3n4Addr, lb.ServiceID](8)
	require.Equal(t, []lb.ServiceID{1, 2, 3, 4, 5, 6}, a.mustLease(t, 10, 0).ServiceIDs)
	for i := range 2 {
		require.NoError(t, a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(i)}).Err)
	}
	r2 := a.doAcquire(&messages.AllocAcquire{Service: true, Frontend: frontend(3)})
	require.ErrorIs(t, r2.Err, engine.ErrIDSpaceExhausted)
}

// While a restarted allocator waits for AllocRestore, a lease and a bind
// wait too: they are answered after the restore, from its state.
func TestRestartedAllocatorQueuesLeaseAndBindUntilRestore(t *testing.T) {
	produce := newAllocatorProducer()
	produce() // the first incarnation
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(actor.PropsFromProducer(produce))

	lease := sys.Root.RequestFuture(pid, &messages.AllocLease{ReqID: 1, Services: 1, Backends: 1}, 5*time.Second)
	bind := sys.Root.RequestFuture(pid, &messages.AllocBind{ReqID: 2, Frontend: frontend(1), ServiceID: 2}, 5*time.Second)
	restore := sys.Root.RequestFuture(pid, &messages.AllocRestore{ReqID: 3,
		Services:       []messages.AllocBinding{{Key: frontend(0), ID: 1, Refs: 1}},
		Backends:       []messages.AllocBinding{{Key: backend(0), ID: 1, Refs: 1}},
		LeasedServices: []lb.ServiceID{2},
	}, 5*time.Second)

	res, err := restore.Result()
	require.NoError(t, err)
	require.NoError(t, res.(*messages.AllocDone).Err)
	res, err = lease.Result()
	require.NoError(t, err)
	l := res.(*messages.AllocLeased)
	require.Equal(t, uint64(1), l.ReqID)
	require.Equal(t, []lb.ServiceID{3}, l.ServiceIDs, "leased after the restore: 1 bound, 2 leased")
	require.Equal(t, []lb.BackendID{2}, l.BackendIDs)
	res, err = bind.Result()
	require.NoError(t, err)
	require.Equal(t, &messages.AllocDone{ReqID: 2}, res, "the bind used the restored lease")
}

// TestAllocatorNeverHandsOutALeasedID interleaves leases, binds (good and
// bad), acquires (some with a leased ID), releases and unholds at random
// and checks after every step that no ID has two keys, every leased ID is
// held and owned by nobody, and no acquire returned a leased ID.
func TestAllocatorNeverHandsOutALeasedID(t *testing.T) {
	rng := testutil.Rand(t)
	a := newTestAllocator(t)
	// A small service space, so that the lease runs short and IDs are
	// reused.
	a.svc = idalloc.New[lb.L3n4Addr, lb.ServiceID](40)
	leasedS := map[lb.ServiceID]bool{}
	leasedB := map[lb.BackendID]bool{}
	svcRefs := map[lb.L3n4Addr]int{} // frontends bound, by the replies
	beRefs := map[lb.L3n4Addr]int{}
	var heldB []lb.BackendID // freed, to unhold
	var maxBE lb.BackendID   // the largest backend ID seen bound or leased
	outcomes := map[string]int{}
	t.Cleanup(func() { t.Logf("outcomes: %v", outcomes) })

	pickS := func() (lb.ServiceID, bool) {
		for id := range leasedS {
			return id, true
		}
		return 0, false
	}
	pickB := func() lb.BackendID {
		for id := range leasedB {
			return id
		}
		return lb.BackendID(1 + rng.IntN(60))
	}
	frontendFree := func() lb.L3n4Addr {
		for range 100 {
			if fe := frontend(rng.IntN(200)); svcRefs[fe] == 0 {
				return fe
			}
		}
		return frontend(1000 + rng.IntN(1000))
	}
	backends := func() []lb.L3n4Addr {
		out := make([]lb.L3n4Addr, rng.IntN(4))
		for i := range out {
			out[i] = backend(rng.IntN(40))
		}
		return out
	}

	for step := range 3000 {
		var what string
		switch r := rng.IntN(100); {
		case r < 15:
			what = "lease"
			ns := rng.IntN(6)
			l := a.mustLease(t, ns, rng.IntN(6))
			if len(l.ServiceIDs) < ns {
				outcomes["lease short"]++
			}
			for _, id := range l.ServiceIDs {
				_, bound := a.svc.LookupID(id)
				require.False(t, leasedS[id] || bound, "step %d: service ID %d leased twice or bound", step, id)
				leasedS[id] = true
			}
			for _, id := range l.BackendIDs {
				maxBE = max(maxBE, id)
				_, bound := a.be.LookupID(id)
				require.False(t, leasedB[id] || bound, "step %d: backend ID %d leased twice or bound", step, id)
				leasedB[id] = true
			}
		case r < 40:
			what = "bind"
			m := &messages.AllocBind{Backends: backends()}
			if id, ok := pickS(); ok && rng.IntN(4) > 0 {
				m.Frontend, m.ServiceID = frontendFree(), id
			}
			for _, k := range m.Backends {
				id := pickB()
				if bound, _, ok := a.be.Lookup(addrkey.BackendOf(k)); ok && rng.IntN(8) > 0 {
					id = bound
				}
				m.BackendIDs = append(m.BackendIDs, id)
			}
			err := a.doBind(m)
			delete(leasedS, m.ServiceID)
			for _, id := range m.BackendIDs {
				delete(leasedB, id)
			}
			if err != nil {
				outcomes["bind failed"]++
				break
			}
			outcomes["bind"]++
			if m.ServiceID != 0 {
				svcRefs[m.Frontend]++
			}
			for _, k := range m.Backends {
				beRefs[k]++
			}
		case r < 60:
			what = "acquire"
			m := &messages.AllocAcquire{Service: rng.IntN(2) == 0, Frontend: frontendFree(), Backends: backends()}
			if id, ok := pickS(); ok && m.Service && rng.IntN(2) == 0 {
				m.LeasedID = id
			}
			got := a.doAcquire(m)
			delete(leasedS, m.LeasedID)
			if got.Err != nil {
				outcomes["acquire failed"]++
				break
			}
			outcomes["acquire"]++
			if m.LeasedID != 0 {
				outcomes["acquire leased"]++
			}
			if m.Service {
				require.False(t, leasedS[got.ServiceID], "step %d: acquire got leased service ID %d", step, got.ServiceID)
				svcRefs[m.Frontend]++
			}
			for i, k := range m.Backends {
				require.False(t, leasedB[got.BackendIDs[i]], "step %d: acquire got leased backend ID %d", step, got.BackendIDs[i])
				beRefs[k]++
			}
		case r < 85:
			what = "release"
			m := &messages.AllocRelease{}
			for k, n := range beRefs {
				if n > 0 && rng.IntN(3) == 0 {
					m.Backends = append(m.Backends, k)
					beRefs[k]--
				}
			}
			for fe, n := range svcRefs {
				if n > 0 && rng.IntN(3) == 0 {
					m.Frontends = append(m.Frontends, fe)
					svcRefs[fe]--
				}
			}
			got := a.handle(m).(*messages.AllocReleased)
			require.NoError(t, got.Err, "step %d", step)
			heldB = append(heldB, got.FreedBackends...)
		default:
			what = "unhold"
			m := &messages.AllocUnhold{BackendIDs: heldB}
			heldB = nil
			if id, ok := pickS(); ok && rng.IntN(4) == 0 { // give one back
				m.ServiceIDs = append(m.ServiceIDs, id)
				delete(leasedS, id)
			}
			require.NoError(t, a.handle(m).(*messages.AllocDone).Err)
		}

		require.Equal(t, slices.Sorted(maps.Keys(leasedS)), slices.Sorted(maps.Keys(a.leasedSvcs)), "step %d (%s): service lease", step, what)
		require.Equal(t, slices.Sorted(maps.Keys(leasedB)), slices.Sorted(maps.Keys(a.leasedBes)), "step %d (%s): backend lease", step, what)
		a.requireLeased(t, slices.Collect(maps.Keys(leasedS)), slices.Collect(maps.Keys(leasedB)))
		for _, b := range a.be.Bindings() {
			maxBE = max(maxBE, b.ID)
		}
		if step%8 == 0 {
			requireHeld(t, a, leasedS, leasedB, heldB, maxBE, step, what)
		}
		requireUnique(t, a.svc.Bindings(), step, what)
		requireUnique(t, a.be.Bindings(), step, what)
		for fe, n := range svcRefs {
			_, refs, _ := a.svc.Lookup(fe)
			require.Equal(t, uint32(min(n, 1)), refs, "step %d (%s): frontend %s", step, what, fe)
		}
		for k, n := range beRefs {
			_, refs, _ := a.be.Lookup(addrkey.BackendOf(k))
			require.Equal(t, uint32(n), refs, "step %d (%s): backend %s", step, what, k)
		}
	}
	requireHeld(t, a, leasedS, leasedB, heldB, maxBE, 3000, "the end")
	require.NotZero(t, outcomes["bind"])
	require.NotZero(t, outcomes["bind failed"])
}

// requireHeld checks that the held IDs are exactly the leased ones and
// the freed backend IDs not yet unheld (held IDs do not leak).
func requireHeld(t *testing.T, a *allocatorActor, leasedS map[lb.ServiceID]bool, leasedB map[lb.BackendID]bool,
	heldB []lb.BackendID, maxBE lb.BackendID, step int, what string) {
	t.Helper()
	for id := range a.svc.Max() {
		require.Equal(t, leasedS[id+1], a.svc.Held(id+1), "step %d (%s): service ID %d held", step, what, id+1)
	}
	freed := map[lb.BackendID]bool{}
	for _, id := range heldB {
		freed[id] = true
	}
	for id := range maxBE + 10 {
		id++
		require.Equal(t, leasedB[id] || freed[id], a.be.Held(id), "step %d (%s): backend ID %d held", step, what, id)
	}
}

// requireUnique checks that no ID is bound to two keys.
func requireUnique[K comparable, I idalloc.ID](t *testing.T, b []idalloc.Binding[K, I], step int, what string) {
	t.Helper()
	seen := map[I]K{}
	for _, x := range b {
		if other, dup := seen[x.ID]; dup {
			t.Fatalf("step %d (%s): ID %d bound to %v and %v", step, what, x.ID, other, x.Key)
		}
		seen[x.ID] = x.Key
	}
}
