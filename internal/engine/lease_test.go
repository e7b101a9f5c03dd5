package engine

import (
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// Scripts of the ID lease (lease.go).

// newLeaseHarness returns a serving core with a lease of 4 service IDs
// and 8 backend IDs, asked for by a first upsert (of 10.96.0.100:80 with
// one backend, IDs 100 and 100, asked of the allocator ahead of the lease)
// and granted as given.
func newLeaseHarness(t *testing.T, grantSvcs []lb.ServiceID, grantBes ...lb.BackendID) *harness {
	t.Helper()
	h := newIdleHarness(t, func(c *Config) { c.LeaseServices, c.LeaseBackends = 4, 8 })
	h.step(Start{})
	h.dumpEmptyMaps()
	h.syncMaglev("maglev: sync []")
	h.expect("alloc: restore services [] backends [] held []")
	h.reply("alloc", done())
	h.expectEvents("up")
	h.call(upsert(svc(t, "10.96.0.100:80", "10.0.100.1:8080")))
	h.expect("alloc: acquire service 10.96.0.100:80/TCP backends [10.0.100.1:8080/TCP]", "alloc: lease services 4 backends 8")
	h.reply("alloc", acquired(100, 100))
	h.reply("alloc", granted(grantSvcs, grantBes...))
	h.expect("be4: write [100=10.0.100.1:8080]", "revnat: write [100=10.96.0.100:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.100:80/TCP#1 10.96.0.100:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 100 created true")
	return h
}

// An upsert the lease covers takes its IDs from it: no allocator round
// trip before the writes. The AllocBind travels beside the backend
// writes, and is awaited only before the commit.
func TestScriptLeasedUpsertWritesWithoutWaitingForTheAllocator(t *testing.T) {
	h := newLeaseHarness(t, []lb.ServiceID{1, 2, 3, 4}, 101, 102, 103, 104, 105, 106, 107, 108)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")))
	h.expect(
		"alloc: bind service 10.96.0.1:80/TCP=1 backends [10.0.1.1:8080/TCP=101 10.0.1.2:8080/TCP=102]",
		"be4: write [101=10.0.1.1:8080 102=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers() // the commit waits for the bind
	h.reply("alloc", done())
	h.expect()
	h.expectAnswers("upsert: id 1 created true")

	// A second service shares a backend (its ID from the table) and adds
	// three: the lease drops below half of its backends and is refilled.
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.1:8080", "10.0.1.3:8080", "10.0.1.4:8080", "10.0.1.5:8080")))
	h.expect(
		"alloc: lease services 2 backends 5",
		"alloc: bind service 10.96.0.2:80/TCP=2 backends [10.0.1.1:8080/TCP=101 10.0.1.3:8080/TCP=103 10.0.1.4:8080/TCP=104 10.0.1.5:8080/TCP=105]",
		"be4: write [101=10.0.1.1:8080 103=10.0.1.3:8080 104=10.0.1.4:8080 105=10.0.1.5:8080]", "revnat: write [2=10.96.0.2:80]")
	h.reply("alloc", granted([]lb.ServiceID{9, 10}, 201, 202, 203, 204, 205))
	h.reply("alloc", done())
	require.Equal(t, []lb.ServiceID{3, 4, 9, 10}, h.c.lease.svcs)
	require.Equal(t, []lb.BackendID{106, 107, 108, 201, 202, 203, 204, 205}, h.c.lease.bes)
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#2 10.96.0.2:80/TCP#3 10.96.0.2:80/TCP#4 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 2 created true")
}

// A batch takes its IDs from the lease while it covers its services;
// once it runs short, the rest are asked of the allocator after the binds
// (a service ID still comes from the lease). The allocator granted less
// than asked: the core asks again only a second later.
func TestScriptBatchBindsWhatTheLeaseCoversFirstThenAcquires(t *testing.T) {
	h := newLeaseHarness(t, []lb.ServiceID{1, 2, 3, 4}, 101, 102)
	a := svc(t, "10.96.0.1:80", "10.0.1.1:8080")
	b := svc(t, "10.96.0.2:80", "10.0.1.2:8080")
	c := svc(t, "10.96.0.3:80", "10.0.1.3:8080")
	h.call(&messages.UpsertBatch{Services: []*lb.Service{a, b, c}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect(
		"alloc: bind service 10.96.0.1:80/TCP=1 backends [10.0.1.1:8080/TCP=101]",
		"alloc: bind service 10.96.0.2:80/TCP=2 backends [10.0.1.2:8080/TCP=102]",
		"alloc: acquire service 10.96.0.3:80/TCP leased 3 backends [10.0.1.3:8080/TCP]")
	h.reply("alloc", done())
	h.reply("alloc", done())
	h.reply("alloc", acquired(3, 7))
	h.expect("be4: write [101=10.0.1.1:8080 102=10.0.1.2:8080 7=10.0.1.3:8080]",
		"revnat: write [1=10.96.0.1:80 2=10.96.0.2:80 3=10.96.0.3:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0 10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0 10.96.0.3:80/TCP#1 10.96.0.3:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert batch: [id 1 created true id 2 created true id 3 created true]")

	h.call(upsert(svc(t, "10.96.0.4:80", "10.0.1.4:8080")))
	h.expect("alloc: acquire service 10.96.0.4:80/TCP leased 4 backends [10.0.1.4:8080/TCP]")
	h.clock = h.clock.Add(2 * time.Second)
	h.reply("alloc", acquired(4, 8))
	h.expect("be4: write [8=10.0.1.4:8080]", "revnat: write [4=10.96.0.4:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.4:80/TCP#1 10.96.0.4:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 4 created true")
	h.call(upsert(svc(t, "10.96.0.5:80", "10.0.1.5:8080")))
	h.expect("alloc: acquire service 10.96.0.5:80/TCP backends [10.0.1.5:8080/TCP]", "alloc: lease services 4 backends 8")
}

// A wanted service ID the lease holds comes from it; one it does not is
// asked of the allocator; a frontend whose key a standalone revNAT entry
// may hold (any protocol, external scope) never binds a leased ID.
func TestScriptWantedIDsAndAnyProtocolFrontendsAndTheLease(t *testing.T) {
	h := newLeaseHarness(t, []lb.ServiceID{5, 6, 7, 8}, 101, 102, 103, 104, 105, 106, 107, 108)
	s := svc(t, "10.96.0.1:80", "10.0.1.1:8080")
	s.Frontend.ID = 6
	h.call(upsert(s))
	h.expect("alloc: bind service 10.96.0.1:80/TCP=6 backends [10.0.1.1:8080/TCP=101]",
		"be4: write [101=10.0.1.1:8080]", "revnat: write [6=10.96.0.1:80]")
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 6 created true")

	s = svc(t, "10.96.0.2:80", "10.0.1.2:8080")
	s.Frontend.ID = 40
	h.call(upsert(s))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP id 40 backends [10.0.1.2:8080/TCP]")
	h.reply("alloc", fail(ErrServiceIDInUse))
	h.expectAnswers("upsert: error: upsert service 10.96.0.2:80/TCP: acquire IDs: service ID in use")

	s = svc(t, "10.96.0.3:80", "10.0.1.3:8080")
	s.Frontend.Protocol, s.Backends[0].Protocol = lb.ANY, lb.ANY
	h.call(upsert(s))
	h.expect("alloc: acquire service 10.96.0.3:80/ANY backends [10.0.1.3:8080/ANY]")
}

// A standalone revNAT entry whose ID the lease holds reserves it out of
// the lease.
func TestScriptRevNATAddOfALeasedIDTakesItOutOfTheLease(t *testing.T) {
	h := newLeaseHarness(t, []lb.ServiceID{5, 6, 7, 8}, 101, 102, 103, 104, 105, 106, 107, 108)
	a, err := lb.ParseL3n4Addr("10.96.0.9:80")
	require.NoError(t, err)
	h.call(&messages.RevNATAdd{Entry: messages.RevNAT{ID: 7, Address: a}, Reply: make(chan messages.RevNATReply, 1)})
	h.expect("alloc: reserve 7 for 10.96.0.9:80/ANY leased")
	require.Equal(t, []lb.ServiceID{5, 6, 8}, h.c.lease.svcs)
	h.reply("alloc", done())
	h.expect("revnat: write [7=10.96.0.9:80]")
	h.reply("revnat", ok())
	h.expectAnswers("revNAT: 1 entries")
}

// The allocator crashes with a bind unanswered: its snapshot holds the
// lease and the bind's leased IDs as leased, and the bind is sent again
// after it; the snapshot after the bind holds the service as bound.
func TestScriptAllocatorCrashKeepsTheLeaseAndTheUnansweredBindsIDsLeased(t *testing.T) {
	h := newLeaseHarness(t, []lb.ServiceID{1, 2, 3, 4}, 101, 102, 103, 104, 105, 106, 107, 108)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("alloc: bind service 10.96.0.1:80/TCP=1 backends [10.0.1.1:8080/TCP=101]",
		"be4: write [101=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	bind := h.lose("alloc")
	h.step(ChildFailed{Child: ChildAllocator, Failed: bind})
	h.expect("alloc: restore services [10.96.0.100:80/TCP=100×1] backends [10.0.100.1:8080/TCP=100×1] held [] leased services [1 2 3 4] backends [101 102 103 104 105 106 107 108]",
		"alloc: bind service 10.96.0.1:80/TCP=1 backends [10.0.1.1:8080/TCP=101]")
	h.reply("alloc", done())
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.step(ChildFailed{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=1×1 10.96.0.100:80/TCP=100×1] backends [10.0.100.1:8080/TCP=100×1 10.0.1.1:8080/TCP=101×1] held [] leased services [2 3 4] backends [102 103 104 105 106 107 108]")
	h.reply("alloc", done())
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")
}

// A bind the allocator refuses (its state and the core's disagree: a
// bug) fails the op, whether it comes before or after the service write:
// the rollback takes the frontend's entries back; the core does not hand
// those IDs out again.
func TestScriptRefusedBindFailsTheOpAndTakesItsFrontendBack(t *testing.T) {
	h := newLeaseHarness(t, []lb.ServiceID{1, 2, 3, 4}, 101, 102, 103, 104, 105, 106, 107, 108)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("alloc: bind service 10.96.0.1:80/TCP=1 backends [10.0.1.1:8080/TCP=101]",
		"be4: write [101=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("alloc", fail(ErrServiceIDInUse))
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]")
	h.reply("svc4", ok())
	h.expect()
	h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: acquire IDs: service ID in use")
	require.Equal(t, []lb.ServiceID{2, 3, 4}, h.c.lease.svcs)
	require.Equal(t, []lb.BackendID{102, 103, 104, 105, 106, 107, 108}, h.c.lease.bes)
	require.Len(t, h.c.services, 1)

	// Refused after the service write went.
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.2:8080")))
	h.expect("alloc: bind service 10.96.0.2:80/TCP=2 backends [10.0.1.2:8080/TCP=102]",
		"be4: write [102=10.0.1.2:8080]", "revnat: write [2=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.reply("alloc", fail(ErrServiceIDInUse))
	h.expect("svc4: write [] delete [10.96.0.2:80/TCP#0 10.96.0.2:80/TCP#1]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: error: upsert service 10.96.0.2:80/TCP: acquire IDs: service ID in use")
	require.Len(t, h.c.services, 1)
}
