package engine

import (
	"fmt"
	"testing"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// Scripts: each test is a protocol story of the core, in the order its
// requests leave and its children answer. The harness (harness_test.go)
// plays every child; "expect" lists what the core sends when its outbox
// is flushed.

// A new service: IDs, then backends and revNAT, then slots before the
// master, then the commit and the answer.
func TestScriptUpsertCreatesInWriteOrder(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")))
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP 10.0.1.2:8080/TCP]")
	h.reply("alloc", acquired(1, 1, 2))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.expect() // nothing until every reply of the step is in
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]")
	h.expectAnswers()
	h.reply("svc4", ok())
	h.expect()
	h.expectAnswers("upsert: id 1 created true")
}

// A service write that keeps failing (EBUSY) is retried three times, then
// the op rolls back what it wrote and gives its IDs back; the caller
// learns which step failed.
func TestScriptUpsertRollsBackWhenServiceWriteKeepsFailing(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]")
	h.reply("alloc", acquired(1, 1))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	for range 1 + mapRetries {
		h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
		h.reply("svc4", fail(errBusy))
	}
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]") // master first
	h.reply("svc4", ok())
	h.expect("revnat: write [] delete [1]")
	h.reply("revnat", ok())
	// The backend the op bound is unbound again: its ID is freed.
	h.expect("alloc: release services [10.96.0.1:80/TCP]")
	h.reply("alloc", ok())
	h.expect("be4: write [] delete [1]")
	h.reply("be4", ok())
	h.expect("alloc: unhold [1]")
	h.expectAnswers()
	h.reply("alloc", ok())
	h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: write service: device or resource busy")
	h.call(&messages.List{Reply: make(chan messages.ListReply, 1)})
	require0(t, h.c.services.len())
}

func require0(t *testing.T, n int) {
	t.Helper()
	if n != 0 {
		t.Fatalf("got %d, want 0", n)
	}
}

// The allocator refuses the ID a service asks for: that service fails
// alone, nothing was written, and its neighbours in the batch are created.
func TestScriptBatchCreatesRunAsOneOpAndAllocatorRefusalFailsOneService(t *testing.T) {
	h := newHarness(t)
	a, b := svc(t, "10.96.0.1:80", "10.0.1.1:8080"), svc(t, "10.96.0.2:80", "10.0.1.2:8080")
	b.Frontend.ID = 7
	h.call(&messages.UpsertBatch{Services: []*lb.Service{a, b}, Reply: make(chan messages.UpsertBatchReply, 1)})
	// One op for the run: one request to the allocator for both services
	// (an item each), then one request per child.
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]; service 10.96.0.2:80/TCP id 7 backends [10.0.1.2:8080/TCP]")
	h.reply("alloc", acquiredEach(granted(1, 1), refused(ErrServiceIDInUse)))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert batch: [id 1 created true error: upsert service 10.96.0.2:80/TCP: acquire IDs: service ID in use]")
}

// A batch whose second service shares a backend with the first: the
// first goes alone (its run ends where the shared backend comes again),
// the second starts the next run with the third, and that run waits in
// the shared backend's queue until the first op is done, then finds the
// backend bound and asks only for what is new.
func TestScriptBatchServiceSharingABackendWithTheRunStartsTheNextRun(t *testing.T) {
	h := newHarness(t)
	a := svc(t, "10.96.0.1:80", "10.0.1.1:8080")
	b := svc(t, "10.96.0.2:80", "10.0.1.1:8080", "10.0.1.2:8080")
	c := svc(t, "10.96.0.3:80", "10.0.1.3:8080")
	h.call(&messages.UpsertBatch{Services: []*lb.Service{a, b, c}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]")
	h.reply("alloc", acquired(1, 1))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	// The first op is done: the second run (b and c) begins.
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]; service 10.96.0.3:80/TCP backends [10.0.1.3:8080/TCP]")
	h.reply("alloc", acquiredEach(granted(2, 2), granted(3, 3)))
	h.flushAnswering(t)
	h.expectAnswers("upsert batch: [id 1 created true id 2 created true id 3 created true]")
	h.expectQueuesEmpty()
}

// A batch that names one frontend twice: the second is an update queued
// behind the run that creates it, and the service after it joins neither.
func TestScriptBatchRepeatingAFrontendQueuesTheUpdateBehindTheRun(t *testing.T) {
	h := newHarness(t)
	a := svc(t, "10.96.0.1:80", "10.0.1.1:8080")
	a2 := svc(t, "10.96.0.1:80", "10.0.1.2:8080")
	c := svc(t, "10.96.0.3:80", "10.0.1.3:8080")
	h.call(&messages.UpsertBatch{Services: []*lb.Service{a, a2, c}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect(
		"alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]",
		"alloc: acquire service 10.96.0.3:80/TCP backends [10.0.1.3:8080/TCP]",
	)
	h.reply("alloc", acquired(1, 1))
	h.reply("alloc", acquired(3, 3))
	h.flushAnswering(t)
	h.expectAnswers("upsert batch: [id 1 created true id 1 created false id 3 created true]")
	h.expectQueuesEmpty()
}

// Deleting a service: master first, then the table (the backends no
// service uses any more are unbound), the backends that became free, the
// revNAT entry; only then may the freed backend IDs be reused, together
// with the service ID (issue 20: an ID freed by one op is not handed out
// before its entry is deleted).
func TestScriptDeleteHoldsFreedIDsUntilTheirEntriesAreGone(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080"), 1, 1)
	h.call(deleteFE(t, "10.96.0.1:80"))
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]")
	h.reply("svc4", ok())
	h.expect("be4: write [] delete [1]", "revnat: write [] delete [1]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("alloc: unhold [1]", "alloc: release services [10.96.0.1:80/TCP]")
	h.reply("alloc", ok())
	h.expectAnswers()
	h.reply("alloc", ok())
	h.expectAnswers("delete: id 1")
}

// create runs an upsert of a new service to its end, answering every
// request with success (IDs: service sid, backends from beID on).
func create(t *testing.T, h *harness, s *lb.Service, sid lb.ServiceID, beID lb.BackendID) {
	t.Helper()
	h.call(upsert(s))
	var fresh []lb.Backend // the backends no other service uses: fresh IDs from beID on
	for _, b := range s.Backends {
		if !h.c.bound(table.BackendKey(b)) {
			fresh = append(fresh, b)
		}
	}
	h.expect(fmt.Sprintf("alloc: acquire service %s backends %s", s.Frontend.L3n4Addr, list(fresh, lb.Backend.String)))
	ids := make([]lb.BackendID, len(fresh))
	for i := range ids {
		ids[i] = beID + lb.BackendID(i)
	}
	h.reply("alloc", acquired(sid, ids...))
	h.flushAnswering(t)
	h.expectAnswers(fmt.Sprintf("upsert: id %d created true", sid))
}

// flushAnswering answers every request with success (those sent before
// it too) until the core sends nothing more: an acquire gets fresh IDs
// (from 1000 up, clear of the IDs the scripts give by hand), anything
// else ok.
func (h *harness) flushAnswering(t *testing.T) {
	t.Helper()
	for range 100 {
		if h.expectAny() == 0 && h.unanswered() == 0 {
			return
		}
		for child, q := range h.sent {
			for _, r := range q {
				a, isAcquire := r.(*messages.AllocAcquire)
				if !isAcquire {
					h.reply(child, ok())
					continue
				}
				if h.freshID == 0 {
					h.freshID = 1000
				}
				items := make([]messages.AcquiredItem, len(a.Items))
				for n, it := range a.Items {
					ids := make([]lb.BackendID, len(it.Backends))
					for i := range ids {
						ids[i] = lb.BackendID(h.freshID + i)
					}
					items[n] = granted(lb.ServiceID(h.freshID), ids...)
					h.freshID += len(ids) + 1
				}
				h.reply(child, acquiredEach(items...))
			}
		}
	}
	t.Fatal("the core kept sending")
}

// unanswered is the number of requests sent and not answered yet.
func (h *harness) unanswered() int {
	n := 0
	for _, q := range h.sent {
		n += len(q)
	}
	return n
}

// expectAny flushes the outbox like expect, whatever it holds, and
// returns the number of requests sent.
func (h *harness) expectAny() int {
	n := 0
	for _, out := range h.c.Ready().Requests {
		messages.EachRequest(out.Msg, func(m any) {
			h.sent[out.Child] = append(h.sent[out.Child], m.(messages.Request))
			n++
		})
	}
	h.c.Advance()
	return n
}

// The allocator fails after an update's commit unbound a backend, before
// its entry is deleted: the restarted allocator gets a snapshot of the
// backend index plus the freed ID the op still holds, so that the ID is
// not handed out again before its entry is gone; the op then lets it be
// reused.
func TestScriptAllocatorRestartBetweenCommitAndReuse(t *testing.T) {
	h := newHarness(t)
	dropOneToServiceWrite(t, h, 1)
	h.reply("svc4", ok())
	h.expect("be4: write [] delete [2]")
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=1×1] backends [1 2]")
	h.reply("alloc", ok())
	h.reply("be4", ok())
	h.expect("alloc: unhold [2]")
	h.reply("alloc", ok())
	h.expectAnswers("upsert: id 1 created false")
}

// A backend used by three services is bound once, to one ID, which the
// allocator is asked for once; the snapshot lists it as in use, and it
// stays bound, its entry kept, until the last service using it goes
// (issue 20: a backend freed while services still use it).
func TestScriptSharedBackendStaysBoundWhileAServiceUsesIt(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.5:8080"), 1, 1)
	for i, fe := range []string{"10.96.0.2:80", "10.96.0.3:80"} {
		h.call(upsert(svc(t, fe, "10.0.1.5:8080")))
		h.expect(fmt.Sprintf("alloc: acquire service %s/TCP backends []", fe)) // bound: no fresh ID
		h.reply("alloc", acquired(lb.ServiceID(i+2)))
		h.flushAnswering(t)
		h.expectAnswers(fmt.Sprintf("upsert: id %d created true", i+2))
	}
	h.step(ChildStopped{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=1×1 10.96.0.2:80/TCP=2×1 10.96.0.3:80/TCP=3×1] backends [1]")
	h.reply("alloc", ok())
	for i, fe := range []string{"10.96.0.1:80", "10.96.0.2:80", "10.96.0.3:80"} {
		h.call(deleteFE(t, fe))
		h.expect(fmt.Sprintf("svc4: write [] delete [%s/TCP#0 %s/TCP#1]", fe, fe))
		h.reply("svc4", ok())
		if i == 2 { // the last user: the backend is unbound, deleted, its ID freed
			h.expect("be4: write [] delete [1]", fmt.Sprintf("revnat: write [] delete [%d]", i+1))
			h.reply("be4", ok())
		} else {
			h.expect(fmt.Sprintf("revnat: write [] delete [%d]", i+1))
		}
		h.reply("revnat", ok())
		if i == 2 {
			h.expect("alloc: unhold [1]", fmt.Sprintf("alloc: release services [%s/TCP]", fe))
			h.reply("alloc", ok())
		} else {
			h.expect(fmt.Sprintf("alloc: release services [%s/TCP]", fe))
		}
		h.reply("alloc", ok())
		h.expectAnswers(fmt.Sprintf("delete: id %d", i+1))
	}
}

// One DeleteBatch of the services sharing a backend, and one of another
// service of its own: the shared backend is deleted and its ID freed
// once, by the last drop that leaves it unbound, beside the other's.
func TestScriptDeleteBatchFreesASharedBackendOnce(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.5:8080"), 1, 1)
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.5:8080")))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends []") // bound: no fresh ID
	h.reply("alloc", acquired(2))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created true")
	create(t, h, svc(t, "10.96.0.3:80", "10.0.1.6:8080"), 3, 2)
	h.call(&messages.DeleteBatch{Frontends: []lb.L3n4Addr{mustAddr(t, "10.96.0.1:80"), mustAddr(t, "10.96.0.2:80"), mustAddr(t, "10.96.0.3:80")},
		Reply: make(chan messages.DeleteBatchReply, 1)})
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1 10.96.0.2:80/TCP#0 10.96.0.2:80/TCP#1 10.96.0.3:80/TCP#0 10.96.0.3:80/TCP#1]")
	h.reply("svc4", ok())
	h.expect("be4: write [] delete [1 2]", "revnat: write [] delete [1 2 3]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("alloc: unhold [1 2]", "alloc: release services [10.96.0.1:80/TCP 10.96.0.2:80/TCP 10.96.0.3:80/TCP]")
	h.reply("alloc", ok())
	h.reply("alloc", ok())
	h.expectAnswers("delete batch: [id 1 id 2 id 3]")
	require.Zero(t, h.c.users.Len(), "no backend left bound")
}

// The allocator fails twice in a row: the first snapshot, lost in the
// second crash, is not sent again (it would be stale: requests answered
// since are not in it); the fresh one goes first, ahead of the request the
// allocator owed.
func TestScriptSecondAllocatorCrashDropsTheStaleSnapshot(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080"), 1, 1)
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.2:8080")))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]")
	acquire := h.lose("alloc")
	h.step(ChildFailed{Child: ChildAllocator, Failed: acquire})
	h.expect(
		"alloc: restore services [10.96.0.1:80/TCP=1×1] backends [1]",
		"alloc: acquire service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]",
	)
	// It fails again, on the snapshot; the acquire is still in its mailbox
	// (queued requests survive an allocator restart).
	h.step(ChildFailed{Child: ChildAllocator, Failed: h.lose("alloc")})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=1×1] backends [1]")
	h.replyTo("alloc", "restore", ok()) // the fresh snapshot first
	h.replyTo("alloc", "acquire", acquired(2, 2))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created true")

	// Two crashes before the outbox is flushed: one snapshot leaves.
	h.step(ChildFailed{Child: ChildAllocator})
	h.step(ChildFailed{Child: ChildAllocator})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=1×1 10.96.0.2:80/TCP=2×1] backends [1 2]")
	h.reply("alloc", ok())
	if n := h.c.stats().OpsInFlight; n != 0 {
		t.Fatalf("%d ops still in flight: the superseded snapshot was never answered", n)
	}
}

// An update that adds a backend another service uses, in another state,
// fails at the service write: the rollback writes the old backends back
// and gives the other service its backend's state back (issue 20).
func TestScriptFailedUpdateRestoresSharedBackendState(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.9.9:80", "10.0.1.1:8080"), 1, 1)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.2:8080"), 2, 2)
	upd := svc(t, "10.96.0.1:80", "10.0.1.2:8080", "10.0.1.1:8080")
	upd.Backends[1].State = lb.BackendStateQuarantined
	h.call(upsert(upd))
	// 10.0.1.1 is bound (10.96.9.9 uses it): held, no allocator request.
	h.expect("be4: write [2=10.0.1.2:8080 1=10.0.1.1:8080(quarantined)]", "revnat: write [2=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	for range 1 + mapRetries {
		h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]")
		h.reply("svc4", fail(errBusy))
	}
	h.expect("be4: write [2=10.0.1.2:8080 1=10.0.1.1:8080]", "revnat: write [2=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0] delete [10.96.0.1:80/TCP#2]")
	h.reply("svc4", ok())
	h.expect() // 10.96.9.9 still uses it: nothing to delete, nothing to free
	h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: write service: device or resource busy")
}

// A backend has one state across services: an update that changes the
// state of a shared backend commits, then rewrites the other service's
// maps from the table (a refresh queued on its frontend), so no two
// services disagree about one backend (a bug the chaos suite found).
func TestScriptSharedBackendStateReachesTheOtherService(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.9:8080"), 1, 1)
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.9:8080")))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends []") // 10.0.1.9 is bound: ID 2
	h.reply("alloc", acquired(2))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created true")

	upd := svc(t, "10.96.0.2:80", "10.0.1.9:8080")
	upd.Backends[0].State = lb.BackendStateTerminating
	h.call(upsert(upd))
	h.expect("be4: write [2=10.0.1.9:8080(terminating)]", "revnat: write [2=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	// The commit answers the caller and queues the refresh of 10.96.0.1,
	// whose slots now put the terminating backend last.
	h.expectAnswers("upsert: id 2 created false")
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.9:8080(terminating)]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	// A refresh cannot tell which backend left maintenance: it deletes
	// every member entry the service should not have (absent keys never
	// reach the kernel).
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]", "members: write [] delete [1/1 1/2 1/0]")
	h.reply("svc4", ok())
	h.reply("members", ok())
	h.expect()
	require.Equal(t, lb.BackendStateTerminating, h.c.services.get(1).Spec.Backends[1].State)
}

// A service sharing a backend is refreshed only when the commit changes
// that backend's state: an update that changes another backend leaves it
// alone, and one that changes the shared backend refreshes each sibling
// once, even a sibling that shares two of its backends.
func TestScriptSharedBackendRefreshesOnlySiblingsWhoseStateChanges(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.8:8080", "10.0.1.9:8080"), 1, 1)
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.1.8:8080", "10.0.1.9:8080")))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends []")
	h.reply("alloc", acquired(2))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created true")

	// 10.0.1.1 is the first service's alone: the second is not refreshed.
	upd := svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.8:8080", "10.0.1.9:8080")
	upd.Backends[0].State = lb.BackendStateTerminating
	h.call(upsert(upd))
	h.expect("be4: write [2=10.0.1.8:8080 3=10.0.1.9:8080 1=10.0.1.1:8080(terminating)]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#3 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created false")
	h.expect()

	// Both shared backends change: one refresh of the second service.
	upd = svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.8:8080", "10.0.1.9:8080")
	upd.Backends[0].State = lb.BackendStateTerminating
	upd.Backends[1].State = lb.BackendStateQuarantined
	upd.Backends[2].State = lb.BackendStateQuarantined
	h.call(upsert(upd))
	h.expect("be4: write [1=10.0.1.1:8080(terminating) 2=10.0.1.8:8080(quarantined) 3=10.0.1.9:8080(quarantined)]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#3 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created false")
	// One refresh of the second service, though it shares both.
	h.expect("be4: write [2=10.0.1.8:8080(quarantined) 3=10.0.1.9:8080(quarantined)]", "revnat: write [2=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#2 10.96.0.2:80/TCP#0]", "members: write [] delete [2/2 2/3 2/0]")
	h.reply("svc4", ok())
	h.reply("members", ok())
	h.expect()
	sib := h.c.services.get(2)
	require.Equal(t, []lb.BackendState{lb.BackendStateQuarantined, lb.BackendStateQuarantined},
		[]lb.BackendState{sib.Spec.Backends[0].State, sib.Spec.Backends[1].State})
}

// Ops on one frontend apply in arrival order: a delete that arrives while
// an upsert of the same frontend runs sends nothing until the upsert is
// done, and then deletes what the upsert created.
func TestScriptOpsOnOneFrontendQueueInArrivalOrder(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.call(deleteFE(t, "10.96.0.1:80"))
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]")
	h.reply("alloc", acquired(1, 1))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]")
	h.reply("svc4", ok())
	h.flushAnswering(t)
	h.expectAnswers("delete: id 1")
}

// Calls that come before restore has finished wait, and are served in
// arrival order once it has; the allocator gets its snapshot first.
func TestScriptCallsWaitForRestore(t *testing.T) {
	h := newIdleHarness(t)
	h.step(Start{})
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.dumpEmptyMaps()
	h.syncMaglev("maglev: sync []")
	h.expectEvents("up")
	h.expect(
		"alloc: restore services [] backends []",
		"alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]",
	)
}

// A reconcile asks every map owner at once, whatever ops are in flight
// (each owner answers between its batches) and reports the maps in a
// fixed order.
func TestScriptReconcileAsksEveryOwnerAndCountsRepairs(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]")
	h.call(&messages.Reconcile{Reply: make(chan messages.ReconcileReply, 1)})
	h.expect("svc4: reconcile", "svc6: reconcile", "be4: reconcile", "be6: reconcile", "revnat: reconcile", "members: reconcile", "affinity: reconcile", "maglev: reconcile []", "srcrange: reconcile")
	h.reply("srcrange", drifted(messages.Drift{Map: "lb4_source_range", Pin: maps.PinOK, Extra: 1}, messages.Drift{Map: "lb6_source_range", Pin: maps.PinOK}))
	h.reply("maglev", drifted(messages.Drift{Map: "lb6_maglev", Pin: maps.PinOK}, messages.Drift{Map: "lb4_maglev", Pin: maps.PinOK, Changed: 1}))
	h.reply("affinity", drifted(messages.Drift{Map: "lb_affinity_match", Pin: maps.PinOK}))
	h.reply("members", drifted(messages.Drift{Map: "lb_members", Pin: maps.PinOK, Changed: 1}))
	h.reply("revnat", drifted(messages.Drift{Map: "lb4_reverse_nat", Pin: maps.PinOK}, messages.Drift{Map: "lb6_reverse_nat", Pin: maps.PinOK}))
	h.reply("be6", drifted(messages.Drift{Map: "lb6_backends", Pin: maps.PinOK}))
	h.reply("be4", drifted(messages.Drift{Map: "lb4_backends", Pin: maps.PinOK, Missing: 1}))
	h.reply("svc6", drifted(messages.Drift{Map: "lb6_services", Pin: maps.PinOK}))
	h.expectAnswers()
	h.reply("svc4", drifted(messages.Drift{Map: "lb4_services", Pin: maps.PinMissing, Extra: 2}))
	h.expectAnswers("reconcile: [" +
		"lb4_services pin missing missing 0 changed 0 extra 2 " +
		"lb4_backends pin ok missing 1 changed 0 extra 0 " +
		"lb4_reverse_nat pin ok missing 0 changed 0 extra 0 " +
		"lb6_services pin ok missing 0 changed 0 extra 0 " +
		"lb6_backends pin ok missing 0 changed 0 extra 0 " +
		"lb6_reverse_nat pin ok missing 0 changed 0 extra 0 " +
		"lb_members pin ok missing 0 changed 1 extra 0 " +
		"lb_affinity_match pin ok missing 0 changed 0 extra 0 " +
		"lb4_maglev pin ok missing 0 changed 1 extra 0 " +
		"lb6_maglev pin ok missing 0 changed 0 extra 0 " +
		"lb4_source_range pin ok missing 0 changed 0 extra 1 " +
		"lb6_source_range pin ok missing 0 changed 0 extra 0]")

	// The upsert went on meanwhile.
	h.reply("alloc", acquired(1, 1))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
}

// An owner that could not repair fails the reconcile, naming its map.
func TestScriptReconcileFailsNamingTheMapThatCouldNotBeRepaired(t *testing.T) {
	h := newHarness(t)
	h.call(&messages.Reconcile{Reply: make(chan messages.ReconcileReply, 1)})
	h.expect("svc4: reconcile", "svc6: reconcile", "be4: reconcile", "be6: reconcile", "revnat: reconcile", "members: reconcile", "affinity: reconcile", "maglev: reconcile []", "srcrange: reconcile")
	h.reply("svc4", drifted(messages.Drift{Map: "lb4_services", Pin: maps.PinOK, Missing: 3, Err: errBusy}))
	for _, c := range []string{"svc6", "be4", "be6", "revnat", "members", "affinity", "maglev", "srcrange"} {
		h.reply(c, drifted())
	}
	h.expectAnswers("reconcile: error: reconcile maps: lb4_services: device or resource busy")
}

// A batch that fills a map rolls back as a whole, then runs again one op
// per service in the places the batch held in its queues: those that fit
// are created, only the rest fail (issue 13: a full map failed the whole
// run although most services fitted). A delete queued behind the batch
// waits for the service it deletes.
func TestScriptBatchThatFillsAMapCreatesWhatFits(t *testing.T) {
	h := newHarness(t)
	a, b := svc(t, "10.96.0.1:80", "10.0.1.1:8080"), svc(t, "10.96.0.2:80", "10.0.1.2:8080")
	h.call(&messages.UpsertBatch{Services: []*lb.Service{a, b}, Reply: make(chan messages.UpsertBatchReply, 1)})
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]; service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]")
	h.call(deleteFE(t, "10.96.0.1:80"))
	h.expect() // queued behind the batch
	h.reply("alloc", acquiredEach(granted(1, 1), granted(2, 2)))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80 2=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0 10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", fail(maps.ErrMapFull)) // not transient: no retry
	// The rollback of the whole batch.
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1 10.96.0.2:80/TCP#0 10.96.0.2:80/TCP#1]")
	h.reply("svc4", ok())
	h.expect("revnat: write [] delete [1 2]")
	h.reply("revnat", ok())
	h.expect("alloc: release services [10.96.0.1:80/TCP 10.96.0.2:80/TCP]")
	h.reply("alloc", ok())
	h.expect("be4: write [] delete [1 2]")
	h.reply("be4", ok())
	h.expect("alloc: unhold [1 2]")
	h.reply("alloc", done())
	h.expectAnswers()
	// Then one op per service, at once.
	h.expect(
		"alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]",
		"alloc: acquire service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]",
	)
	h.reply("alloc", acquired(1, 1))
	h.reply("alloc", acquired(2, 2))
	h.expect("be4: write [1=10.0.1.1:8080]", "be4: write [2=10.0.1.2:8080]",
		"revnat: write [1=10.96.0.1:80]", "revnat: write [2=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]", "svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.reply("svc4", fail(maps.ErrMapFull))
	h.expectAnswers()
	// The first is created; the delete queued behind the batch now runs
	// on it, and the second rolls back alone.
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]",
		"svc4: write [] delete [10.96.0.2:80/TCP#0 10.96.0.2:80/TCP#1]")
	h.reply("svc4", ok())
	h.reply("svc4", ok())
	// The delete unbinds 10.0.1.1 at its commit (and deletes its revNAT
	// entry beside it), the rollback 10.0.1.2.
	h.expect("be4: write [] delete [1]", "revnat: write [] delete [1]", "revnat: write [] delete [2]")
	h.reply("revnat", ok())
	h.reply("revnat", ok())
	h.expect("alloc: release services [10.96.0.2:80/TCP]")
	h.reply("alloc", ok())
	h.expect("be4: write [] delete [2]")
	h.reply("be4", ok())
	h.reply("be4", ok())
	h.expect("alloc: unhold [1]", "alloc: release services [10.96.0.1:80/TCP]", "alloc: unhold [2]")
	h.reply("alloc", done())
	h.reply("alloc", done())
	h.expectAnswers("delete: id 1")
	h.reply("alloc", done())
	h.expectAnswers("upsert batch: [id 1 created true error: upsert service 10.96.0.2:80/TCP: write service: map full]")
}

// Backends that stop taking a UDP service's new connections are reported
// once the service map no longer offers them (so that connected sockets
// on them can be closed and their clients reconnect elsewhere): removed,
// gone terminating, or with the whole service deleted. TCP services are
// not reported: their connections end with their own sockets.
func TestScriptBackendsLeavingAUDPServiceAreReported(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(svc(t, "10.96.0.10:53/udp", "10.0.1.1:53/udp", "10.0.1.2:53/udp", "10.0.1.3:53/udp")))
	h.expect("alloc: acquire service 10.96.0.10:53/UDP backends [10.0.1.1:53/UDP 10.0.1.2:53/UDP 10.0.1.3:53/UDP]")
	h.reply("alloc", acquired(1, 1, 2, 3))
	h.expect("be4: write [1=10.0.1.1:53 2=10.0.1.2:53 3=10.0.1.3:53]", "revnat: write [1=10.96.0.10:53]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.10:53/UDP#1 10.96.0.10:53/UDP#2 10.96.0.10:53/UDP#3 10.96.0.10:53/UDP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")
	h.expectEvents()

	// 10.0.1.1 leaves, 10.0.1.2 goes terminating: both reported, after
	// the service write.
	upd := svc(t, "10.96.0.10:53/udp", "10.0.1.2:53/udp", "10.0.1.3:53/udp")
	upd.Backends[0].State = lb.BackendStateTerminating
	h.call(upsert(upd))
	h.expect("be4: write [3=10.0.1.3:53 2=10.0.1.2:53(terminating)]", "revnat: write [1=10.96.0.10:53]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.10:53/UDP#1 10.96.0.10:53/UDP#2 10.96.0.10:53/UDP#0] delete [10.96.0.10:53/UDP#3]")
	h.expectEvents()
	h.reply("svc4", ok())
	h.expectEvents("backends left 1: [10.0.1.1:53/UDP 10.0.1.2:53/UDP]")
	h.expect("be4: write [] delete [1]")
	h.reply("be4", ok())
	h.expect("alloc: unhold [1]")
	h.reply("alloc", done())
	h.expectAnswers("upsert: id 1 created false")

	// Deleted: its one active backend is reported.
	h.call(deleteFE(t, "10.96.0.10:53/udp"))
	h.expect("svc4: write [] delete [10.96.0.10:53/UDP#0 10.96.0.10:53/UDP#1 10.96.0.10:53/UDP#2]")
	h.reply("svc4", ok())
	h.expectEvents("backends left 1: [10.0.1.3:53/UDP]")

	// A TCP service is not reported.
	h2 := newHarness(t)
	h2.call(upsert(svc(t, "10.96.0.11:80", "10.0.2.1:80")))
	h2.expect("alloc: acquire service 10.96.0.11:80/TCP backends [10.0.2.1:80/TCP]")
	h2.reply("alloc", acquired(1, 1))
	h2.expect("be4: write [1=10.0.2.1:80]", "revnat: write [1=10.96.0.11:80]")
	h2.reply("be4", ok())
	h2.reply("revnat", ok())
	h2.expect("svc4: write [10.96.0.11:80/TCP#1 10.96.0.11:80/TCP#0]")
	h2.reply("svc4", ok())
	h2.call(deleteFE(t, "10.96.0.11:80"))
	h2.expect("svc4: write [] delete [10.96.0.11:80/TCP#0 10.96.0.11:80/TCP#1]")
	h2.reply("svc4", ok())
	h2.expectEvents()
}

// A service with one Local traffic policy carries two backend sets: the
// external scope holds its node-local backends, the internal scope all of
// them, each with its own master; lb_members records which are local.
// Back to Cluster, the internal set goes after the new single set is
// written, and the member entries after that.
func TestScriptLocalPolicyWritesTwoBackendSets(t *testing.T) {
	h := newHarness(t)
	s := svc(t, "192.168.1.10:30080", "10.0.1.1:8080", "10.0.1.2:8080")
	s.Type, s.ExtTrafficPolicyLocal = lb.SVCTypeNodePort, true
	s.Backends[1].NodeLocal = true
	h.call(upsert(s))
	h.expect("alloc: acquire service 192.168.1.10:30080/TCP backends [10.0.1.1:8080/TCP 10.0.1.2:8080/TCP]")
	h.reply("alloc", acquired(1, 1, 2))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=192.168.1.10:30080]", "members: write [1/2=w100,f1]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("members", ok())
	// (The external set has one slot of the two a set may have: slot 2
	// is deleted in case an earlier write left it; absent keys never reach
	// the kernel.)
	h.expect("svc4: write [192.168.1.10:30080/TCP#1 192.168.1.10:30080/TCP#0 192.168.1.10:30080/TCP/internal#1 192.168.1.10:30080/TCP/internal#2 192.168.1.10:30080/TCP/internal#0] delete [192.168.1.10:30080/TCP#2]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")
	sv := h.c.services.get(1)
	ext, intl := table.MasterAt(sv, lb.ScopeExternal).Value, table.MasterAt(sv, lb.ScopeInternal).Value
	require.Equal(t, uint16(1), ext.Count, "external: the local backend")
	require.Equal(t, uint16(2), intl.Count, "internal: every backend")
	require.Equal(t, lb.Flag2TwoScopes, ext.Flags2&lb.Flag2TwoScopes)
	require.Equal(t, ext.Flags2, intl.Flags2)

	// Cluster again: one set of both backends; the internal set and the
	// member entry are deleted after it is written.
	c := svc(t, "192.168.1.10:30080", "10.0.1.1:8080", "10.0.1.2:8080")
	c.Type = lb.SVCTypeNodePort
	h.call(upsert(c))
	h.expect("svc4: write [192.168.1.10:30080/TCP#1 192.168.1.10:30080/TCP#2 192.168.1.10:30080/TCP#0] delete [192.168.1.10:30080/TCP/internal#0 192.168.1.10:30080/TCP/internal#1 192.168.1.10:30080/TCP/internal#2]", "be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=192.168.1.10:30080]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("svc4", ok())
	h.expect("members: write [] delete [1/2]")
	h.reply("members", ok())
	h.expectAnswers("upsert: id 1 created false")
}

// A backend shared by two UDP services that goes terminating through one
// of them leaves both: the other's clients are reported once its refresh
// is written.
func TestScriptSharedBackendLeavingIsReportedForEveryUDPService(t *testing.T) {
	h := newHarness(t)
	for i, fe := range []string{"10.96.0.10:53/udp", "10.96.0.11:53/udp"} {
		h.call(upsert(svc(t, fe, "10.0.1.1:53/udp", "10.0.1.2:53/udp")))
		if i == 0 {
			h.expect("alloc: acquire service 10.96.0.10:53/UDP backends [10.0.1.1:53/UDP 10.0.1.2:53/UDP]")
			h.reply("alloc", acquired(1, 1, 2))
			h.expect("be4: write [1=10.0.1.1:53 2=10.0.1.2:53]", "revnat: write [1=10.96.0.10:53]")
		} else {
			h.expect("alloc: acquire service 10.96.0.11:53/UDP backends []") // both bound
			h.reply("alloc", acquired(2))
			h.expect("be4: write [1=10.0.1.1:53 2=10.0.1.2:53]", "revnat: write [2=10.96.0.11:53]")
		}
		h.reply("be4", ok())
		h.reply("revnat", ok())
		h.expect(fmt.Sprintf("svc4: write [%[1]s/UDP#1 %[1]s/UDP#2 %[1]s/UDP#0]", fe[:len(fe)-4]))
		h.reply("svc4", ok())
	}
	h.expectAnswers("upsert: id 1 created true", "upsert: id 2 created true")

	upd := svc(t, "10.96.0.10:53/udp", "10.0.1.1:53/udp", "10.0.1.2:53/udp")
	upd.Backends[0].State = lb.BackendStateTerminating
	h.call(upsert(upd))
	h.expect("be4: write [2=10.0.1.2:53 1=10.0.1.1:53(terminating)]", "revnat: write [1=10.96.0.10:53]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.10:53/UDP#1 10.96.0.10:53/UDP#2 10.96.0.10:53/UDP#0]")
	h.reply("svc4", ok())
	h.expectEvents("backends left 1: [10.0.1.1:53/UDP]")
	// The refresh of service 2 writes, then reports.
	h.expect("be4: write [2=10.0.1.2:53 1=10.0.1.1:53(terminating)]", "revnat: write [2=10.96.0.11:53]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.11:53/UDP#1 10.96.0.11:53/UDP#2 10.96.0.11:53/UDP#0]", "members: write [] delete [2/2 2/1 2/0]")
	h.expectEvents()
	h.reply("svc4", ok())
	h.reply("members", ok())
	h.expectEvents("backends left 2: [10.0.1.1:53/UDP]")
}

// Each source changes only its own services: a Kubernetes service's
// source is recorded before its slots are written; the API can neither
// change nor delete it (refused before any request), and a sync of one
// source deletes only that source's services.
func TestScriptEachSourceChangesOnlyItsOwnServices(t *testing.T) {
	h := newHarness(t)
	k := svc(t, "10.96.0.1:80", "10.0.1.1:8080")
	k.Source = lb.SourceKubernetes
	h.call(upsert(k))
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]")
	h.reply("alloc", acquired(1, 1))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]", "members: write [1/record=kubernetes]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("members", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")

	owned := "frontend owned by another source: 10.96.0.1:80/TCP is service 1, owned by kubernetes, not api: change or delete the Kubernetes Service instead"
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.2:8080")))
	h.expect()
	h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: " + owned)
	h.call(deleteFE(t, "10.96.0.1:80"))
	h.expect()
	h.expectAnswers("delete: error: delete service 10.96.0.1:80/TCP: " + owned)

	create(t, h, svc(t, "10.96.0.2:80", "10.0.1.1:8080"), 2, 1) // shares the backend
	h.call(&messages.Sync{Source: lb.SourceKubernetes, Reply: make(chan messages.SyncReply, 1)})
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]")
	h.reply("svc4", ok())
	h.flushAnswering(t)
	h.expectAnswers("sync: upserted 0 deleted 1")
	require.Equal(t, 1, h.c.services.len())
	require.Equal(t, lb.SourceAPI, h.c.services.get(2).Spec.Source, "the API's service is left")

	// A sync whose desired services are of another source changes nothing.
	h.call(&messages.Sync{Source: lb.SourceAPI, Desired: []*lb.Service{k}, Reply: make(chan messages.SyncReply, 1)})
	h.expect()
	h.expectAnswers("sync: error: sync: service 0: invalid sync: its source is kubernetes, the sync's is api")
}

// A sync creates its new services as runs, like a batch: one op for the
// run, so one request per map owner and step (10,000 services make tens of
// requests, not hundreds of thousands); a failing service of the run
// fails alone.
func TestScriptSyncCreatesNewServicesAsOneRun(t *testing.T) {
	h := newHarness(t)
	a, b, c := svc(t, "10.96.0.1:80", "10.0.1.1:8080"), svc(t, "10.96.0.2:80", "10.0.1.2:8080"), svc(t, "10.96.0.3:80", "10.0.1.3:8080")
	c.Frontend.ID = 7
	h.call(&messages.Sync{Source: lb.SourceAPI, Desired: []*lb.Service{a, b, c}, Reply: make(chan messages.SyncReply, 1)})
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]; service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]; service 10.96.0.3:80/TCP id 7 backends [10.0.1.3:8080/TCP]")
	h.reply("alloc", acquiredEach(granted(1, 1), granted(2, 2), refused(ErrServiceIDInUse)))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80 2=10.96.0.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0 10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("sync: error: sync: upsert service 10.96.0.3:80/TCP: acquire IDs: service ID in use")
	require.Equal(t, 2, h.c.services.len())
}

// A terminating backend may not become active through the API (terminating
// is final), but the Kubernetes sync may make it active again: its address
// was reused by a ready endpoint.
func TestScriptKubernetesMayReviveATerminatingBackend(t *testing.T) {
	h := newHarness(t)
	for _, src := range []lb.Source{lb.SourceAPI, lb.SourceKubernetes} {
		fe := map[lb.Source]string{lb.SourceAPI: "10.96.0.1:80", lb.SourceKubernetes: "10.96.0.2:80"}[src]
		sid := lb.ServiceID(1 + src)
		s := svc(t, fe, "10.0.1.1:8080")
		s.Source, s.Backends[0].State = src, lb.BackendStateTerminating
		create(t, h, s, sid, lb.BackendID(1+src))
		active := svc(t, fe, "10.0.1.1:8080")
		active.Source = src
		h.call(upsert(active))
		if src == lb.SourceAPI {
			h.expect()
			h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: backend 10.0.1.1:8080: invalid state \"active\": cannot change from terminating to active (terminating is final)")
			h.call(deleteFE(t, fe))
			h.flushAnswering(t)
			h.expectAnswers("delete: id 1")
			continue
		}
		h.flushAnswering(t)
		h.expectAnswers("upsert: id 2 created false")
		require.Equal(t, lb.BackendStateActive, h.c.services.get(2).Spec.Backends[0].State)
	}
}

// A delete by ID that names a frontend deletes the service with that ID
// only while it has that frontend: the façade's guard against a retry that
// finds the ID on another service. Nothing is sent to a child otherwise.
func TestScriptDeleteByIDWithAnotherFrontendFindsNothing(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080"), 1, 1)
	other, err := lb.ParseL3n4Addr("10.96.0.2:80")
	require.NoError(t, err)
	h.call(&messages.Delete{ID: 1, Frontend: other, Reply: make(chan messages.DeleteReply, 1)})
	h.expect()
	h.expectAnswers("delete: error: delete service 1: service not found")

	mine, err := lb.ParseL3n4Addr("10.96.0.1:80")
	require.NoError(t, err)
	h.call(&messages.Delete{ID: 1, Frontend: mine, Reply: make(chan messages.DeleteReply, 1)})
	h.expect("svc4: write [] delete [10.96.0.1:80/TCP#0 10.96.0.1:80/TCP#1]")
}

// dropOneToServiceWrite creates service 10.96.0.1:80 (ID 1) with backends
// 10.0.1.1 and 10.0.1.2 (IDs 1 and 2), then upserts it with backend keep
// (1 or 2) alone, up to its service write, sent and not answered (the
// update makes nothing new: its backend and revNAT writes, answered, go
// beside the service write).
func dropOneToServiceWrite(t *testing.T, h *harness, keep int) {
	t.Helper()
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"), 1, 1)
	h.call(upsert(svc(t, "10.96.0.1:80", fmt.Sprintf("10.0.1.%d:8080", keep))))
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0] delete [10.96.0.1:80/TCP#2]",
		fmt.Sprintf("be4: write [%d=10.0.1.%d:8080]", keep, keep), "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
}
