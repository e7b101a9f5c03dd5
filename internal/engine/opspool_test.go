package engine

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/benchset"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// A single call's op is reused by the next single call once complete:
// the second Upsert (and the second delete) runs in the object of the
// first, which answered its own caller, and the second's answer and
// requests are its own.
func TestASingleCallsOpIsReusedByTheNextOne(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080"), 1, 1)
	require.Len(t, h.c.ops.upserts, 1, "the completed op was not kept")
	first := h.c.ops.upserts[0]
	require.Equal(t, upsertOne{keys: first.keys[:0], idx: first.idx, old: first.old, next: first.next, bes: first.bes}, *first, "a kept op is zero but for its arrays")
	require.Equal(t, 1, cap(first.bes), "the array of its copy of the call's backends was not kept")
	require.Equal(t, newService{ids: first.next.ids[:0]}, first.next, "of the service it wrote, only the IDs' array was kept")
	require.Len(t, first.idx, 2, "its backend index lists' array was kept")
	require.Equal(t, oldService{}, first.old, "a creation read no old service")

	up := upsert(svc(t, "10.96.0.2:80", "10.0.2.1:8080"))
	h.call(up)
	require.Empty(t, h.c.ops.upserts, "the second upsert took the kept op")
	require.Same(t, up, first.w.call, "the second upsert runs in the first one's object")
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends [10.0.2.1:8080/TCP]")
	h.reply("alloc", acquired(2, 2))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created true")
	require.Equal(t, []*upsertOne{first}, h.c.ops.upserts)

	for i, fe := range []string{"10.96.0.1:80", "10.96.0.2:80"} {
		h.call(deleteFE(t, fe))
		h.flushAnswering(t)
		h.expectAnswers(fmt.Sprintf("delete: id %d", i+1))
		require.Len(t, h.c.ops.deletes, 1)
	}
	require.Zero(t, h.c.queues.len())
	require.Zero(t, h.c.stats().OpsInFlight)
}

// Ops the pool does not take back: a batch's, and a single call's that
// was aborted (Stop) rather than completed.
func TestOnlyCompletedSingleCallOpsAreReused(t *testing.T) {
	h := newHarness(t)
	h.call(&messages.UpsertBatch{Services: []*lb.Service{svc(t, "10.96.0.1:80", "10.0.1.1:8080"), svc(t, "10.96.0.2:80", "10.0.2.1:8080")}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.flushAnswering(t)
	require.Len(t, h.answered, 1)
	h.answered = nil
	require.Empty(t, h.c.ops.upserts, "a batch's op was kept")

	h.call(upsert(svc(t, "10.96.0.3:80", "10.0.3.1:8080")))
	h.step(Stop{Err: errors.New("engine gone")})
	require.Empty(t, h.c.ops.upserts, "an aborted op was kept")
	require.Empty(t, h.c.ops.spentUpserts)
}

// A single call's op reads the service it replaces or deletes into arrays
// it keeps when reused, up to oldKeptMax backends: the next call on a
// service of as many backends or fewer reads into the same arrays, and
// its outcome is its own.
func TestASingleCallReadsTheOldServiceIntoKeptArrays(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"), 1, 1)
	create(t, h, svc(t, "10.96.0.2:80", "10.0.2.1:8080"), 2, 3)
	h.call(deleteFE(t, "10.96.0.1:80"))
	h.flushAnswering(t)
	h.expectAnswers("delete: id 1")
	require.Len(t, h.c.ops.deletes, 1)
	d := h.c.ops.deletes[0]
	require.Equal(t, 2, cap(d.old.bes), "the deleted service's two backends were read into kept arrays")
	bes := d.old.bes[:1]
	h.call(deleteFE(t, "10.96.0.2:80"))
	h.flushAnswering(t)
	h.expectAnswers("delete: id 2")
	require.Same(t, &bes[0], &h.c.ops.deletes[0].old.bes[:1][0], "the second delete read into the first one's arrays")
	require.Zero(t, h.c.services.len())
	require.Zero(t, h.c.users.Len(), "every backend of both services was freed")

	// Too large to keep.
	var many []string
	for i := range oldKeptMax + 1 {
		many = append(many, fmt.Sprintf("10.0.%d.%d:8080", 3+i/250, 1+i%250))
	}
	h.call(upsert(svc(t, "10.96.0.3:80", many...)))
	h.flushAnswering(t)
	h.answered = nil
	h.call(deleteFE(t, "10.96.0.3:80"))
	h.flushAnswering(t)
	require.Len(t, h.c.ops.deletes, 1)
	require.Equal(t, oldService{}, h.c.ops.deletes[0].old, "the arrays of a large service were kept")
}

// A single call's op makes the service it writes in the object it is
// reused with, the backend IDs in the array the last call kept (up to
// oldKeptMax of them): the table keeps a form of its own of each service,
// so the one written first is unchanged by the next call.
func TestASingleCallMakesTheServiceItWritesInKeptArrays(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"), 1, 1)
	require.Len(t, h.c.ops.upserts, 1)
	ids := h.c.ops.upserts[0].next.ids[:1]
	require.Equal(t, 2, cap(ids), "the two backends' IDs were not kept")

	create(t, h, svc(t, "10.96.0.2:80", "10.0.2.1:8080"), 2, 3)
	require.Same(t, &ids[0], &h.c.ops.upserts[0].next.ids[:1][0], "the second upsert made its service in other arrays")
	require.Equal(t, []lb.BackendID{1, 2}, h.c.services.get(1).BackendIDs, "the first service changed when its op was reused")
	require.Equal(t, []lb.BackendID{3}, h.c.services.get(2).BackendIDs)

	// An update, in the same arrays: the kept backend keeps its ID.
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.2.1:8080", "10.0.2.2:8080")))
	h.expect("alloc: acquire backends [10.0.2.2:8080/TCP]")
	h.reply("alloc", acquired(0, 4))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created false")
	require.Equal(t, []lb.BackendID{3, 4}, h.c.services.get(2).BackendIDs)
	require.Equal(t, []lb.BackendID{1, 2}, h.c.services.get(1).BackendIDs)

	// Too large to keep.
	var many []string
	for i := range oldKeptMax + 1 {
		many = append(many, fmt.Sprintf("10.0.%d.%d:8080", 3+i/250, 1+i%250))
	}
	large := svc(t, "10.96.0.3:80", many...)
	h.call(upsert(large))
	h.flushAnswering(t)
	h.answered = nil
	require.Len(t, h.c.ops.upserts, 1)
	require.Equal(t, newService{}, h.c.ops.upserts[0].next, "the IDs' array of a large service was kept")
	id, ok := h.c.byFE.Get(large.Frontend.L3n4Addr)
	require.True(t, ok)
	require.Len(t, h.c.services.get(id).BackendIDs, oldKeptMax+1)
}

// An Upsert's service is its caller's (messages.Upsert): the core reads
// it once, when it takes the call, into the op's own copy. The caller's
// changes after that do not reach the op, and the core's slot order does
// not reach the caller's backends.
func TestAnUpsertReadsTheCallersServiceOnlyWhenItTakesTheCall(t *testing.T) {
	h := newHarness(t)
	s := svc(t, "10.96.0.1:80", "10.0.1.2:8080", "10.0.1.1:8080")
	given := slices.Clone(s.Backends)
	m := &messages.Upsert{Service: s, Reply: make(chan messages.UpsertReply, 1)}
	h.call(m)
	require.False(t, m.Withdraw(), "the core did not take the call")
	require.Equal(t, given, s.Backends, "the core reordered the caller's backends")

	s.Backends[0].Port, s.Backends = 9999, s.Backends[:1] // the caller's, from now on
	h.flushAnswering(t)
	require.Len(t, h.answered, 1)
	require.Contains(t, h.answered[0], "created true")
	id, ok := h.c.byFE.Get(s.Frontend.L3n4Addr)
	require.True(t, ok)
	got := h.c.services.get(id).Spec.Backends
	require.ElementsMatch(t, given, got, "the op upserted the caller's changes")
}

// A call its caller withdrew before the core took it is answered unread:
// nothing is done, and the caller's service is not read.
func TestAWithdrawnUpsertIsAnsweredUnread(t *testing.T) {
	h := newHarness(t)
	m := &messages.Upsert{Service: svc(t, "10.96.0.1:80", "10.0.1.1:8080"), Reply: make(chan messages.UpsertReply, 1)}
	require.True(t, m.Withdraw())
	m.Service = nil // read, it would panic
	h.call(m)
	h.expect()
	h.expectAnswers("upsert: error: upsert service: " + ErrCallWithdrawn.Error())
	require.False(t, m.Take(), "a withdrawn call was taken")
	require.Zero(t, h.c.services.len())
	require.Zero(t, h.c.queues.len())

	// Taken with no service (the façade never sends one): refused as an
	// empty service is, and released.
	m = &messages.Upsert{Reply: make(chan messages.UpsertReply, 1)}
	h.call(m)
	h.expect()
	require.Len(t, h.answered, 1)
	require.Contains(t, h.answered[0], "upsert service: ")
	h.answered = nil
	require.False(t, m.Withdraw(), "the call was not taken, or is still held")
}

// The runs of large calls take the arrays of their queue keys, their
// plan's items, backend index lists, services, backend IDs and the
// service IDs they hold from those the last runs gave back: bulk callers come in waves, and the second
// wave's runs use the first one's arrays. Once the core is quiet (Quiet),
// it keeps none.
func TestTheNextWaveOfRunsTakesTheArraysTheLastOneGaveBack(t *testing.T) {
	c, a := startedCore()
	svcs := benchset.Sequential(160, 10)
	kinds := []string{"keys", "items", "index lists", "services", "backend IDs", "service IDs held"}
	kept := func() [][]any {
		r := &c.ops.run
		return [][]any{firstElems(r.keys), firstElems(r.items), firstElems(r.idx), firstElems(r.svcs), firstElems(r.ids), firstElems(r.holds)}
	}
	var waves [2][][]any // per wave, per kind: the arrays kept after it
	for wave := range 2 {
		stepWave(t, c, a, svcs[wave*80:wave*80+80]) // two calls of 40 services in flight at once
		waves[wave] = kept()
	}
	for k, kind := range kinds {
		require.Len(t, waves[0][k], 2, "one run a call, its %s' array given back", kind)
		require.ElementsMatch(t, waves[0][k], waves[1][k], "the second wave's runs made new arrays of %s", kind)
	}
	require.Equal(t, 160, c.services.len())
	for _, s := range svcs {
		id, ok := c.byFE.Get(s.Frontend.L3n4Addr)
		require.True(t, ok)
		require.Len(t, c.services.get(id).BackendIDs, 10)
	}
	for _, items := range c.ops.run.items {
		require.Equal(t, make([]upsertItem, cap(items)), items[:cap(items)], "a kept items' array holds pointers")
	}
	for _, holds := range c.ops.run.holds {
		require.Equal(t, make([]messages.AllocBinding, cap(holds)), holds[:cap(holds)], "a kept holds' array holds addresses")
	}

	c.Step(Quiet{})
	require.Equal(t, runArrays{}, c.ops.run, "a quiet core keeps run arrays")
}

// firstElems returns the address of the first element of each array.
func firstElems[T any](arrays [][]T) []any {
	var r []any
	for _, a := range arrays {
		r = append(r, &a[:1][0])
	}
	return r
}

// A core that keeps run arrays and nothing else past what an engine at
// rest keeps (a small batch's write arrays are within sparesIdle) rests
// too, so that its actor tells it Quiet, which drops them.
func TestACoreKeepingOnlyRunArraysRestsUntilQuiet(t *testing.T) {
	c, a := startedCore()
	stepWave(t, c, a, benchset.Sequential(4, 1))
	require.False(t, c.spares.large(), "the small batches' write arrays are past what a core at rest keeps")
	require.True(t, c.ops.keepsRunArrays())
	require.True(t, c.Resting(), "run arrays kept, and the core does not rest: no Quiet would drop them")

	c.Step(Quiet{})
	require.False(t, c.ops.keepsRunArrays())
	require.False(t, c.Resting())
}
