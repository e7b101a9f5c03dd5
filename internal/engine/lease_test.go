package engine

import (
	"fmt"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// The lease of the lease scripts: 4 service IDs and 8 backend IDs.
const leaseServices, leaseBackends = 4, 8

// newLeaseHarness returns a core restored from empty maps with a lease of
// leaseServices service IDs and leaseBackends backend IDs: once it serves
// it asks for the lease, behind the allocator's snapshot; the test
// answers with service IDs 7-10 and backend IDs 100-107.
func newLeaseHarness(t *testing.T) *harness {
	t.Helper()
	return newLeaseHarnessOf(t, []lb.ServiceID{7, 8, 9, 10}, []lb.BackendID{100, 101, 102, 103, 104, 105, 106, 107})
}

// newLeaseHarnessOf is newLeaseHarness with the lease answered with
// svcIDs and beIDs.
func newLeaseHarnessOf(t *testing.T, svcIDs []lb.ServiceID, beIDs []lb.BackendID) *harness {
	t.Helper()
	h := newIdleHarness(t, func(c *Config) { c.LeaseServiceIDs, c.LeaseBackendIDs = leaseServices, leaseBackends })
	h.step(Start{})
	h.dumpEmptyMaps()
	h.syncMaglev("maglev: sync []")
	h.expect("alloc: restore services [] backends []", fmt.Sprintf("alloc: lease %d services %d backends", leaseServices, leaseBackends))
	h.reply("alloc", done())
	h.reply("alloc", leased(svcIDs, beIDs))
	h.expectEvents("up")
	return h
}

// A new service takes its service ID and its backends' IDs from the
// lease: no acquire. The allocator is told which frontend got the
// service ID beside the backend writes, and the lease is refilled once
// half of it is used.
func TestScriptLeaseCreatesWithoutAskingTheAllocator(t *testing.T) {
	h := newLeaseHarness(t)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")))
	h.expect("alloc: claim [10.96.0.1:80/TCP=7]", "be4: write [100=10.0.1.1:8080 101=10.0.1.2:8080]", "revnat: write [7=10.96.0.1:80]")
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 7 created true")

	// The second service leaves 2 service IDs and 4 backend IDs: half of
	// each; the refill asks for what was used.
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.3:8080", "10.0.1.4:8080")))
	h.expect("alloc: lease 2 services 4 backends", "alloc: claim [10.96.0.2:80/TCP=8]",
		"be4: write [102=10.0.1.3:8080 103=10.0.1.4:8080]", "revnat: write [8=10.96.0.2:80]")
	h.reply("alloc", leased([]lb.ServiceID{11, 12}, []lb.BackendID{108, 109, 110, 111}))
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#2 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 8 created true")
	if got := len(h.c.lease.svc); got != 4 {
		t.Fatalf("lease holds %d service IDs, want 4", got)
	}

	// A restarted allocator is told the lease: its service IDs held, its
	// backend IDs in use.
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=7×1 10.96.0.2:80/TCP=8×1] backends [100 101 102 103 104 105 106 107 108 109 110 111] leased [9 10 11 12]")
	h.reply("alloc", done())
}

// A service asking for an ID the lease holds gets it: the core takes it
// out of its lease and the allocator unholds it before the acquire.
func TestScriptLeaseGivesUpAWantedID(t *testing.T) {
	h := newLeaseHarness(t)
	s := svc(t, "10.96.0.1:80", "10.0.1.1:8080")
	s.Frontend.ID = 9
	h.call(upsert(s))
	h.expect("alloc: unhold services [9] backends []", "alloc: acquire service 10.96.0.1:80/TCP id 9 backends [10.0.1.1:8080/TCP]")
	h.reply("alloc", done())
	h.reply("alloc", acquired(9, 1))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [9=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 9 created true")
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=9×1] backends [1 100 101 102 103 104 105 106 107] leased [7 8 10]")
	h.reply("alloc", done())
}

// A batch of more than one service asks the allocator, as without the
// lease (one round trip for the run); the lease is left for single calls.
func TestScriptLeaseServesOnlySingleServiceCalls(t *testing.T) {
	h := newLeaseHarness(t)
	a, b := svc(t, "10.96.0.1:80", "10.0.1.1:8080"), svc(t, "10.96.0.2:80", "10.0.1.2:8080")
	h.call(&messages.UpsertBatch{Services: []*lb.Service{a, b}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]; service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]")
	h.reply("alloc", acquiredEach(granted(11, 1), granted(12, 2)))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [11=10.96.0.1:80 12=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0 10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert batch: [id 11 created true id 12 created true]")
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=11×1 10.96.0.2:80/TCP=12×1] backends [1 2 100 101 102 103 104 105 106 107] leased [7 8 9 10]")
	h.reply("alloc", done())
}

// A service from the lease whose service write keeps failing is rolled
// back: its service ID, claimed, is released as an acquired one; its
// backend ID is freed, and joins the lease's end again (the lease has
// room for it) rather than going back to the allocator.
func TestScriptLeaseRollbackReleasesTheClaimedServiceID(t *testing.T) {
	h := newLeaseHarness(t)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("alloc: claim [10.96.0.1:80/TCP=7]", "be4: write [100=10.0.1.1:8080]", "revnat: write [7=10.96.0.1:80]")
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	for range 1 + mapRetries {
		h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
		h.reply("svc4", fail(errBusy))
	}
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]")
	h.reply("svc4", ok())
	h.expect("revnat: write [] delete [7]")
	h.reply("revnat", ok())
	h.expect("alloc: release services [10.96.0.1:80/TCP]")
	h.reply("alloc", ok())
	h.expect("be4: write [] delete [100]")
	h.reply("be4", ok())
	h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: write service: device or resource busy")
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [] backends [100 101 102 103 104 105 106 107] leased [8 9 10]")
	h.reply("alloc", done())
}

// A service that comes while the first lease is asked for waits for it
// rather than asking the allocator: it gets the lease's first ID, as it
// would have from the allocator.
func TestScriptLeaseServiceWaitsForTheRefillInFlight(t *testing.T) {
	h := newIdleHarness(t, func(c *Config) { c.LeaseServiceIDs, c.LeaseBackendIDs = 4, 8 })
	h.step(Start{})
	h.dumpEmptyMaps()
	h.syncMaglev("maglev: sync []")
	h.expect("alloc: restore services [] backends []", "alloc: lease 4 services 8 backends")
	h.reply("alloc", done())
	h.expectEvents("up")
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect() // nothing until the lease is in
	h.reply("alloc", leased([]lb.ServiceID{1, 2, 3, 4}, []lb.BackendID{1, 2, 3, 4, 5, 6, 7, 8}))
	h.expect("alloc: claim [10.96.0.1:80/TCP=1]", "be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")
}

// The allocator restarts while a service waits for the lease: the
// snapshot counts the lease, the refill is sent again after it, and the
// service takes its IDs from what it brings.
func TestScriptLeaseAllocatorRestartWhileAServiceWaits(t *testing.T) {
	h := newLeaseHarnessOf(t, []lb.ServiceID{1, 2, 3, 4}, []lb.BackendID{1, 2, 3, 4, 5, 6})
	// The first service leaves 3 backend IDs: the refill is asked for.
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080", "10.0.1.3:8080")))
	h.expect("alloc: lease 1 services 5 backends", "alloc: claim [10.96.0.1:80/TCP=1]",
		"be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080 3=10.0.1.3:8080]", "revnat: write [1=10.96.0.1:80]")
	lost := h.lose("alloc") // the refill: the allocator fails on it below
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#3 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")
	// The second service needs 4 backend IDs: it waits for the refill.
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.4:8080", "10.0.1.5:8080", "10.0.1.6:8080", "10.0.1.7:8080")))
	h.expect()
	h.step(ChildFailed{Child: ChildAllocator, Failed: lost})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=1×1] backends [1 2 3 4 5 6] leased [2 3 4]", "alloc: lease 1 services 5 backends")
	h.reply("alloc", done())
	h.reply("alloc", leased([]lb.ServiceID{5}, []lb.BackendID{7, 8, 9, 10, 11}))
	h.expect("alloc: claim [10.96.0.2:80/TCP=2]", "alloc: lease 1 services 4 backends",
		"be4: write [4=10.0.1.4:8080 5=10.0.1.5:8080 6=10.0.1.6:8080 7=10.0.1.7:8080]", "revnat: write [2=10.96.0.2:80]")
}

// A standalone revNAT entry whose ID the lease holds: the core takes the
// ID out of its lease and the allocator unholds it before the
// reservation; the next service gets the lease's next ID.
func TestScriptLeaseGivesUpTheIDOfAStandaloneRevNATEntry(t *testing.T) {
	h := newLeaseHarness(t)
	addr, err := lb.ParseL3n4Addr("10.96.0.9:80")
	if err != nil {
		t.Fatal(err)
	}
	h.call(&messages.RevNATAdd{Entry: messages.RevNAT{ID: 7, Address: addr}, Reply: make(chan messages.RevNATReply, 1)})
	h.expect("alloc: unhold services [7] backends []", "alloc: reserve 7 for 10.96.0.9:80/ANY")
	h.reply("alloc", done())
	h.reply("alloc", done())
	h.expect("revnat: write [7=10.96.0.9:80]")
	h.reply("revnat", ok())
	h.expectAnswers("revNAT: 1 entries")
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	// Half the lease's service IDs are used: it is refilled.
	h.expect("alloc: lease 2 services 1 backends", "alloc: claim [10.96.0.1:80/TCP=8]", "be4: write [100=10.0.1.1:8080]", "revnat: write [8=10.96.0.1:80]")
}

// A refill of the lease puts what is left of it, then the IDs granted, at
// the start of the array the lease was a window of, when they fit: taking
// IDs moves the window's start on, and appending to it would make a new
// array at every refill.
func TestALeaseRefillMovesWhatIsLeftToItsArraysStart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		buf        []int // the lease's array; the lease is its last left
		left       int
		more, want []int
		sameArray  bool
	}{
		{"room", append(make([]int, 0, 8), 1, 2, 3, 4, 5, 6), 2, []int{7, 8, 9}, []int{5, 6, 7, 8, 9}, true},
		{"room exactly", append(make([]int, 0, 4), 1, 2, 3), 1, []int{4, 5, 6}, []int{3, 4, 5, 6}, true},
		{"nothing left", append(make([]int, 0, 4), 1, 2), 0, []int{3, 4}, []int{3, 4}, true},
		{"no room", append(make([]int, 0, 4), 1, 2, 3, 4), 2, []int{5, 6, 7}, []int{3, 4, 5, 6, 7}, false},
		{"first refill", nil, 0, []int{1, 2}, []int{1, 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := tc.buf
			live := buf[len(buf)-tc.left:]
			got := topUp(&buf, live, tc.more)
			require.Equal(t, tc.want, got)
			require.Equal(t, got, buf, "the new array was not kept")
			if tc.sameArray {
				require.Same(t, &tc.buf[:1][0], &got[0], "a refill with room made a new array")
			} else if cap(tc.buf) > 0 {
				require.NotSame(t, &tc.buf[:1][0], &got[0])
			}
		})
	}
}

// An update that drops a backend frees its ID once the entry is deleted;
// the ID joins the lease's end (it has room), so the update is answered
// without a round trip to the allocator, which keeps the ID in use.
func TestScriptLeaseTakesBackTheIDsAnUpdateFrees(t *testing.T) {
	h := newLeaseHarness(t)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")))
	h.expect("alloc: claim [10.96.0.1:80/TCP=7]", "be4: write [100=10.0.1.1:8080 101=10.0.1.2:8080]", "revnat: write [7=10.96.0.1:80]")
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 7 created true")

	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0] delete [10.96.0.1:80/TCP#2]", "be4: write [100=10.0.1.1:8080]", "revnat: write [7=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("svc4", ok())
	h.expect("be4: write [] delete [101]")
	h.reply("be4", ok())
	h.expectAnswers("upsert: id 7 created false")

	// The lease holds 101 again, after 102-107: a new backend takes 102,
	// and the refill (half the service IDs used) asks for the 2 backend
	// IDs the lease lacks: 101 counts.
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.3:8080")))
	h.expect("alloc: lease 2 services 2 backends", "alloc: claim [10.96.0.2:80/TCP=8]", "be4: write [102=10.0.1.3:8080]", "revnat: write [8=10.96.0.2:80]")
	h.reply("alloc", leased([]lb.ServiceID{11, 12}, []lb.BackendID{108, 109}))
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 8 created true")
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=7×1 10.96.0.2:80/TCP=8×1] backends [100 101 102 103 104 105 106 107 108 109] leased [9 10 11 12]")
	h.reply("alloc", done())
}

// A freed ID the lease has no room for goes back to the allocator, as
// before the lease took any: here the lease is whole (the service came in
// a batch, whose IDs the allocator gave).
func TestScriptFreedIDsGoBackToTheAllocatorWhenTheLeaseIsFull(t *testing.T) {
	h := newLeaseHarness(t)
	h.call(&messages.UpsertBatch{Services: []*lb.Service{svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"), svc(t, "10.96.0.2:80", "10.0.1.3:8080")}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP 10.0.1.2:8080/TCP]; service 10.96.0.2:80/TCP backends [10.0.1.3:8080/TCP]")
	h.reply("alloc", acquiredEach(granted(11, 1, 2), granted(12, 3)))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080 3=10.0.1.3:8080]", "revnat: write [11=10.96.0.1:80 12=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0 10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert batch: [id 11 created true id 12 created true]")

	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0] delete [10.96.0.1:80/TCP#2]", "be4: write [1=10.0.1.1:8080]", "revnat: write [11=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("svc4", ok())
	h.expect("be4: write [] delete [2]")
	h.reply("be4", ok())
	h.expect("alloc: unhold [2]")
	h.reply("alloc", ok())
	h.expectAnswers("upsert: id 11 created false")
}

// The lease takes back what it has room for and the allocator gets the
// rest; a snapshot taken while that unhold is in flight counts each
// freed ID once: the kept one in the lease, the other as the op's.
func TestScriptFreedIDsSplitBetweenTheLeaseAndTheAllocator(t *testing.T) {
	h := newLeaseHarness(t)
	h.call(&messages.UpsertBatch{Services: []*lb.Service{svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080", "10.0.1.3:8080"), svc(t, "10.96.0.3:80", "10.0.1.9:8080")}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP 10.0.1.2:8080/TCP 10.0.1.3:8080/TCP]; service 10.96.0.3:80/TCP backends [10.0.1.9:8080/TCP]")
	h.reply("alloc", acquiredEach(granted(11, 1, 2, 3), granted(12, 4)))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080 3=10.0.1.3:8080 4=10.0.1.9:8080]", "revnat: write [11=10.96.0.1:80 12=10.96.0.3:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#3 10.96.0.1:80/TCP#0 10.96.0.3:80/TCP#1 10.96.0.3:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert batch: [id 11 created true id 12 created true]")

	// A new service takes 100: the lease has room for one ID.
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.4:8080")))
	h.expect("alloc: claim [10.96.0.2:80/TCP=7]", "be4: write [100=10.0.1.4:8080]", "revnat: write [7=10.96.0.2:80]")
	h.reply("alloc", done())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 7 created true")

	// The first service drops two backends: 2 joins the lease, 3 goes
	// back to the allocator.
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0] delete [10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#3]", "be4: write [1=10.0.1.1:8080]", "revnat: write [11=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("svc4", ok())
	h.expect("be4: write [] delete [2 3]")
	h.reply("be4", ok())
	h.expect("alloc: unhold [3]")
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.2:80/TCP=7×1 10.96.0.1:80/TCP=11×1 10.96.0.3:80/TCP=12×1] backends [1 2 3 4 100 101 102 103 104 105 106 107] leased [8 9 10]", "alloc: unhold [3]")
	h.reply("alloc", done())
	h.reply("alloc", ok())
	h.expectAnswers("upsert: id 11 created false")
}
