package engine

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/actorlb/actorlb/internal/benchset"
	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// oldBackends finds an old service's backends by key, each once, whether
// it scans them (up to oldBackendsScanMax) or indexes them in a map: both
// answer as a map from key to ID whose entries go when found.
func TestOldBackendsFindEachBackendOnceByScanOrMap(t *testing.T) {
	r := testutil.Rand(t)
	backend := func(x int) lb.Backend {
		return lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 1, byte(x >> 8), byte(x)}), Port: 8080, Protocol: lb.TCP}}
	}
	for _, n := range []int{1, 2, 10, oldBackendsScanMax - 1, oldBackendsScanMax, oldBackendsScanMax + 1, 200} {
		for range 20 {
			svc := &table.Service{}
			model := map[lb.L3n4Addr]lb.BackendID{}
			for _, x := range r.Perm(3 * n)[:n] { // distinct keys
				id := lb.BackendID(1 + r.IntN(1<<20))
				svc.Spec.Backends = append(svc.Spec.Backends, backend(x))
				svc.BackendIDs = append(svc.BackendIDs, id)
				model[table.BackendKey(backend(x))] = id
			}
			o := newOldBackends(svc)
			require.Equal(t, n > oldBackendsScanMax, o.m != nil, "%d backends: a map only past the scan's bound", n)
			for range 2 * n { // keys old and new, some asked twice
				k := table.BackendKey(backend(r.IntN(3 * n)))
				i, ok := o.take(k)
				want, wok := model[k]
				require.Equal(t, wok, ok, "take %s", k)
				if ok {
					require.Equal(t, want, svc.BackendIDs[i], "take %s", k)
					require.Equal(t, k, table.BackendKey(svc.Spec.Backends[i]), "take %s", k)
				}
				delete(model, k)
			}
			for i, b := range svc.Spec.Backends {
				_, left := model[table.BackendKey(b)]
				require.Equal(t, !left, o.taken(i), "backend %d of %d", i, n)
			}
		}
	}
	var none oldBackends // a new service: nothing to find
	_, ok := none.take(table.BackendKey(backend(1)))
	require.False(t, ok)
}

// A single call's op (one service to upsert, one frontend to delete) is
// the op, its plan and its item in one allocation, plus the upsert's
// queue keys; a batch's op keeps its parts apart, the plan holding every
// item.
func TestASingleCallsOpIsOneAllocation(t *testing.T) {
	svcs := benchset.Sequential(2, 10)
	slots := []int{0, 1}
	var o *op
	allocs := testing.AllocsPerRun(100, func() { o = (&Core{}).upsertOp(svcs[:1], nil, slots[:1]) })
	require.Equal(t, 2.0, allocs, "the upsert op and its keys")
	require.Len(t, o.keys, 11, "the frontend's queue and ten backends'")
	p := o.plan.(*upsertPlan)
	require.Len(t, p.items, 1)
	require.Same(t, svcs[0], p.items[0].spec)
	require.Equal(t, 0, p.items[0].slot)

	o = (&Core{}).upsertOp(svcs, nil, slots)
	p = o.plan.(*upsertPlan)
	require.Len(t, p.items, 2)
	require.Same(t, svcs[1], p.items[1].spec)
	require.Equal(t, 1, p.items[1].slot)

	items := []deleteItem{{fe: svcs[0].Frontend.L3n4Addr}}
	allocs = testing.AllocsPerRun(100, func() { o = (&Core{}).deleteOp(items) })
	require.Equal(t, 1.0, allocs, "the delete op, its plan and its key")
	require.Equal(t, []qkey{feQueue(svcs[0].Frontend.L3n4Addr)}, o.keys)
	require.Len(t, o.plan.(*deletePlan).items, 1)
}

// Freeing the backends of the services an op drops fills the room
// expectFrees made: the freed lists are grown once, not through every size
// on the way.
func TestFreeingBackendsFillsTheRoomExpectFreesMade(t *testing.T) {
	var r releaser
	o := &op{}
	r.expectFrees(o, [2]int{10, 3})
	require.GreaterOrEqual(t, cap(r.freed[0]), 10)
	require.GreaterOrEqual(t, cap(r.freed[1]), 3)
	require.GreaterOrEqual(t, cap(o.freed), 13)
	arrays := []*uint32{unsafe.SliceData(r.freed[0]), unsafe.SliceData(r.freed[1]), unsafe.SliceData(o.freed)}
	for i := range 10 {
		r.free(o, maps.IPv4, lb.BackendID(i+1))
	}
	for i := range 3 {
		r.free(o, maps.IPv6, lb.BackendID(100+i))
	}
	require.Equal(t, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, r.freed[0])
	require.Equal(t, []uint32{100, 101, 102}, r.freed[1])
	require.Equal(t, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 101, 102}, o.freed)
	require.Equal(t, arrays, []*uint32{unsafe.SliceData(r.freed[0]), unsafe.SliceData(r.freed[1]), unsafe.SliceData(o.freed)}, "a list was grown again")

	// Room for more adds to what is there.
	r.expectFrees(o, [2]int{5, 0})
	require.GreaterOrEqual(t, cap(r.freed[0]), 15)
	require.Equal(t, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, r.freed[0])
}

// An update that drops a backend and fails rolls back what it wrote, not
// the backend it dropped: an op taking that backend may have written it
// meanwhile (a backend dropped is not one of the dropping op's queues),
// and its state is that op's.
func TestAFailedUpdateLeavesTheBackendItDroppedAlone(t *testing.T) {
	h := newHarness(t)
	dropOneToServiceWrite(t, h, 2) // A drops 10.0.1.1 and waits for its service write
	// B takes 10.0.1.1, quarantined, and completes first.
	b := svc(t, "10.96.0.2:80", "10.0.1.1:8080")
	b.Backends[0].State = lb.BackendStateQuarantined
	h.call(upsert(b))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends []")
	h.reply("alloc", acquired(2))
	h.expect("be4: write [1=10.0.1.1:8080(quarantined)]", "revnat: write [2=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.replyTo("svc4", "write [10.96.0.2:80", ok())
	h.expectAnswers("upsert: id 2 created true")
	// A's service write fails: it rolls back.
	h.replyTo("svc4", "write [10.96.0.1:80", fail(maps.ErrFamily))
	h.expect("be4: write [2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]") // not 1=10.0.1.1 (active)
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.flushAnswering(t)
	h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: write service: " + maps.ErrFamily.Error())
	for _, fe := range []string{"10.96.0.1:80", "10.96.0.2:80"} {
		id, ok := h.c.byFE.Get(mustAddr(t, fe))
		require.True(t, ok)
		got := h.c.services.get(id)
		i := slices.IndexFunc(got.Spec.Backends, func(b lb.Backend) bool { return b.Addr.String() == "10.0.1.1" })
		require.GreaterOrEqual(t, i, 0, "%s", fe)
		require.Equal(t, lb.BackendStateQuarantined, got.Spec.Backends[i].State, "%s", fe)
	}
}

// appendKeptBackendEntries leaves out the dropped backends, few or many,
// wherever they are in the old service.
func TestRollbackWritesTheKeptBackendsOnly(t *testing.T) {
	for _, dropped := range []int{0, 3, 21} {
		old := &table.Service{}
		var removed []lb.L3n4Addr
		for i := range 30 {
			b := lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}), Port: 8080, Protocol: lb.TCP}}
			old.Spec.Backends = append(old.Spec.Backends, b)
			old.BackendIDs = append(old.BackendIDs, lb.BackendID(i+1))
			if i%30 < dropped {
				removed = append(removed, table.BackendKey(b))
			}
		}
		got := appendKeptBackendEntries(nil, &upsertItem{old: old, removed: removed})
		require.Len(t, got, 30-dropped, "%d dropped", dropped)
		for _, e := range got {
			require.Greater(t, e.ID, uint32(dropped), "%d dropped: backend %d written back", dropped, e.ID)
		}
	}
	// Every third dropped, the first and the last among them.
	old := &table.Service{}
	var removed []lb.L3n4Addr
	var want []uint32
	for i := range 10 {
		b := lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 0, 2, byte(i + 1)}), Port: 8080, Protocol: lb.TCP}}
		old.Spec.Backends = append(old.Spec.Backends, b)
		old.BackendIDs = append(old.BackendIDs, lb.BackendID(i+1))
		if i%3 == 0 {
			removed = append(removed, table.BackendKey(b))
		} else {
			want = append(want, uint32(i+1))
		}
	}
	var ids []uint32
	for _, e := range appendKeptBackendEntries(nil, &upsertItem{old: old, removed: removed}) {
		ids = append(ids, e.ID)
	}
	require.Equal(t, want, ids)
}

// An update that makes nothing new (every backend it keeps, in its
// state; no new member entry, affinity match or source range) writes its
// service beside its backends and revNAT entry, in one step: nothing the
// service entries point at is made by it. An upsert of an unchanged
// service too, whose writes repair maps that drifted.
func TestScriptAnUpdateThatMakesNothingNewWritesItsServiceInOneStep(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"), 1, 1)

	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")))
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]",
		"be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("svc4", ok())
	h.reply("be4", ok())
	h.expectAnswers() // the revNAT write is part of the step
	h.reply("revnat", ok())
	h.expectAnswers("upsert: id 1 created false")

	// A backend dropped: deleted once the service no longer has it.
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.2:8080")))
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0] delete [10.96.0.1:80/TCP#2]",
		"be4: write [2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("svc4", ok())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("be4: write [] delete [1]")
	h.reply("be4", ok())
	h.expect("alloc: unhold [1]")
	h.reply("alloc", ok())
	h.expectAnswers("upsert: id 1 created false")
	h.expectQueuesEmpty()
}

// An update that makes anything new keeps the make-before-break order:
// what it makes (a backend, a backend's new state, a member entry, an
// affinity match, a source range) is written, and answered, before the
// service entries that point at it.
func TestAnUpdateThatMakesSomethingNewWritesItBeforeTheService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s *lb.Service)
	}{
		{"a new backend", func(s *lb.Service) {
			s.Backends = append(s.Backends, svc(t, "10.96.0.9:80", "10.0.1.3:8080").Backends[0])
		}},
		{"a backend terminating", func(s *lb.Service) { s.Backends[1].State = lb.BackendStateTerminating }},
		{"a backend in maintenance", func(s *lb.Service) { s.Backends[1].State = lb.BackendStateMaintenance }},
		{"a backend's weight", func(s *lb.Service) { s.Backends[0].Weight = 300 }},
		{"a node-local backend", func(s *lb.Service) { s.Backends[0].NodeLocal = true }},
		{"session affinity", func(s *lb.Service) { s.SessionAffinity = true }},
		{"a source range", func(s *lb.Service) {
			s.Type = lb.SVCTypeLoadBalancer
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			s := svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")
			create(t, h, s, 1, 1)
			s = s.DeepCopy()
			tc.change(s)
			h.call(upsert(s))
			first := h.flush()
			require.NotEmpty(t, first)
			for _, r := range first {
				require.False(t, strings.HasPrefix(r, "svc4:"), "the service went with what it makes: %q", first)
			}
			h.flushAnswering(t)
			h.expectAnswers("upsert: id 1 created false")
			h.expectQueuesEmpty()
		})
	}
}

// A batch of updates is one op: one service in it that makes something
// new keeps the order for all of them.
func TestABatchOfUpdatesWritesInOneStepOnlyWhenNoneMakesAnythingNew(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"), 1, 1)
	create(t, h, svc(t, "10.96.0.2:80", "10.0.2.1:8080"), 2, 3)

	same := func() []*lb.Service {
		return []*lb.Service{svc(t, "10.96.0.1:80", "10.0.1.1:8080"), svc(t, "10.96.0.2:80", "10.0.2.1:8080")}
	}
	h.call(&messages.UpsertBatch{Services: same(), Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0 10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0] delete [10.96.0.1:80/TCP#2]",
		"be4: write [1=10.0.1.1:8080 3=10.0.2.1:8080]", "revnat: write [1=10.96.0.1:80 2=10.96.0.2:80]")
	h.flushAnswering(t)
	h.expectAnswers("upsert batch: [id 1 created false id 2 created false]")

	batch := same()
	batch[1].Backends[0].State = lb.BackendStateTerminating
	h.call(&messages.UpsertBatch{Services: batch, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect("be4: write [1=10.0.1.1:8080 3=10.0.2.1:8080(terminating)]", "revnat: write [1=10.96.0.1:80 2=10.96.0.2:80]")
	h.flushAnswering(t)
	h.expectAnswers("upsert batch: [id 1 created false id 2 created false]")
	h.expectQueuesEmpty()
}

// notIn gives the elements of from that want lacks, in from's order,
// whether it scans want (up to notInScanMax) or indexes it; nil when
// want has them all.
func TestNotInKeepsFromsOrderWhetherItScansOrIndexes(t *testing.T) {
	r := testutil.Rand(t)
	for range 200 {
		from := make([]int, r.IntN(20))
		for i := range from {
			from[i] = r.IntN(200)
		}
		want := make([]int, r.IntN(2*notInScanMax))
		for i := range want {
			want[i] = r.IntN(200)
		}
		var expect []int
		for _, x := range from {
			if !slices.Contains(want, x) {
				expect = append(expect, x)
			}
		}
		require.Equal(t, expect, notIn(from, want), "from %v want %v", from, want)
	}
	require.Nil(t, notIn([]int{1, 2}, []int{2, 1}))
}
