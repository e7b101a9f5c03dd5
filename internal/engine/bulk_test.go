package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// Scripts of the bulk lane (bulk.go): large calls begin in chunks while
// single-service calls are about, and wait in the core for admission.

// bulkChunks makes chunks of two services, one in flight at once.
func bulkChunks(c *Config) { c.BulkChunk, c.BulkInFlight = 2, 1 }

// batchOf returns an UpsertBatch of services 10.96.<net>.i:80, each with
// the one backend 10.0.<net>.i:8080, for i in 1..n.
func batchOf(t *testing.T, net, n int) *messages.UpsertBatch {
	t.Helper()
	m := &messages.UpsertBatch{Reply: make(chan messages.UpsertBatchReply, 1)}
	for i := 1; i <= n; i++ {
		m.Services = append(m.Services, svc(t, fmt.Sprintf("10.96.%d.%d:80", net, i), fmt.Sprintf("10.0.%d.%d:8080", net, i)))
	}
	return m
}

// acquireLine is the allocator request of new services is of batchOf
// (one op's: an item each).
func acquireLine(net int, is ...int) string {
	items := make([]string, len(is))
	for n, i := range is {
		items[n] = fmt.Sprintf("service 10.96.%d.%d:80/TCP backends [10.0.%d.%d:8080/TCP]", net, i, net, i)
	}
	return "alloc: acquire " + strings.Join(items, "; ")
}

// With K big batches queued, a single Upsert's requests go out at once,
// before the later chunks of the batches begin; the chunks are admitted
// in turn, one per call, one in flight; each call's answer has every
// service's result, in order.
func TestScriptSingleUpsertIsNotStuckBehindQueuedBatches(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // a single call: the lane is throttled
	h.call(batchOf(t, 1, 5))
	h.expect(acquireLine(1, 1, 2)) // the first chunk only
	h.call(batchOf(t, 2, 2))
	h.expect() // waits: the budget is spent
	h.call(upsert(svc(t, "10.96.9.2:80", "10.0.9.2:8080")))
	h.expect("alloc: acquire service 10.96.9.2:80/TCP backends [10.0.9.2:8080/TCP]") // at once
	h.reply("alloc", acquiredEach(granted(2, 2), granted(3, 3)))
	h.reply("alloc", acquired(4, 4))
	h.expect("be4: write [2=10.0.1.1:8080 3=10.0.1.2:8080]", "be4: write [4=10.0.9.2:8080]",
		"revnat: write [2=10.96.1.1:80 3=10.96.1.2:80]", "revnat: write [4=10.96.9.2:80]")
	h.reply("be4", ok())
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.1.1:80/TCP#1 10.96.1.1:80/TCP#0 10.96.1.2:80/TCP#1 10.96.1.2:80/TCP#0]",
		"svc4: write [10.96.9.2:80/TCP#1 10.96.9.2:80/TCP#0]")
	h.reply("svc4", ok()) // the first chunk is done: the other call's turn
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 4 created true")
	h.expect(acquireLine(2, 1, 2))
	// Then the rest of the first call, a chunk at a time.
	require.Equal(t, []string{acquireLine(1, 3, 4), acquireLine(1, 5)}, h.drain(t))
	h.expectAnswers("upsert batch: [id 101 created true id 103 created true]",
		"upsert batch: [id 2 created true id 3 created true id 105 created true id 107 created true id 109 created true]")
	if n := h.c.services.len(); n != 9 {
		t.Fatalf("%d services in the table, want 9", n)
	}
}

// A chunk whose map write fails rolls back and fails its own services;
// the next chunk of the same call is created.
func TestScriptFailedChunkFailsOnlyItsServices(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1)
	h.call(batchOf(t, 1, 3))
	h.expect(acquireLine(1, 1, 2))
	h.reply("alloc", acquiredEach(granted(2, 2), granted(3, 3)))
	h.expect("be4: write [2=10.0.1.1:8080 3=10.0.1.2:8080]", "revnat: write [2=10.96.1.1:80 3=10.96.1.2:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.1.1:80/TCP#1 10.96.1.1:80/TCP#0 10.96.1.2:80/TCP#1 10.96.1.2:80/TCP#0]")
	h.reply("svc4", fail(maps.ErrFamily)) // not transient, not a full map: the chunk fails
	h.expect("svc4: write [] delete [10.96.1.1:80/TCP#0 10.96.1.1:80/TCP#1 10.96.1.2:80/TCP#0 10.96.1.2:80/TCP#1]")
	h.reply("svc4", ok())
	h.expect("revnat: write [] delete [2 3]")
	h.reply("revnat", ok())
	h.expect("alloc: release services [10.96.1.1:80/TCP 10.96.1.2:80/TCP]")
	h.reply("alloc", ok())
	h.expect("be4: write [] delete [2 3]")
	h.reply("be4", ok())
	h.expect("alloc: unhold [2 3]")
	h.reply("alloc", done())
	h.expect(acquireLine(1, 3)) // the next chunk
	h.reply("alloc", acquired(4, 4))
	h.drain(t)
	h.expectAnswers("upsert batch: [" +
		"error: upsert service 10.96.1.1:80/TCP: write service: " + maps.ErrFamily.Error() + " " +
		"error: upsert service 10.96.1.2:80/TCP: write service: " + maps.ErrFamily.Error() + " " +
		"id 4 created true]")
}

// A single op on a frontend of a batch chunk that waits for admission
// queues behind it: it neither overtakes the chunk nor is overtaken by
// later chunks; its own requests go out once the chunk is done.
func TestScriptSingleOpBehindAWaitingChunkKeepsItsOrder(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1)
	h.call(batchOf(t, 1, 6))
	h.expect(acquireLine(1, 1, 2))
	h.call(deleteFE(t, "10.96.1.3:80")) // in the second chunk, not begun
	h.expect()
	// The chunks one after the other; the delete runs once the chunk that
	// creates 10.96.1.3:80 is done, and deletes what it created (ID 105).
	require.Equal(t, []string{acquireLine(1, 3, 4), acquireLine(1, 5, 6)}, h.drain(t))
	if _, ok := h.c.byFE.Get(mustAddr(t, "10.96.1.3:80")); ok {
		t.Fatal("10.96.1.3:80 still in the table: the delete did not run after its creation")
	}
	// The delete waits for its chunk alone, not for the later ones: the
	// two answers come in either order.
	require.ElementsMatch(t, []string{"upsert batch: [id 101 created true id 103 created true id 105 created true id 107 created true id 109 created true id 111 created true]", "delete: id 105"}, h.answered)
	h.answered = nil
}

// Without a single-service call about, a batch begins whole, as one op
// (one request per child and step), however large; once BulkWindow has
// passed since the last single call, the same.
func TestScriptBatchAloneBeginsWhole(t *testing.T) {
	h := newHarness(t, bulkChunks)
	h.call(batchOf(t, 1, 3))
	h.expect(acquireLine(1, 1, 2, 3))
	h.drain(t)
	h.expectAnswers("upsert batch: [id 101 created true id 103 created true id 105 created true]")
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1)
	h.clock = h.clock.Add(defaultBulkWindow)
	h.call(batchOf(t, 2, 3))
	h.expect(acquireLine(2, 1, 2, 3))
}

// A DeleteBatch is cut into chunks too: one in flight; the answer has
// every frontend's result, in order.
func TestScriptDeleteBatchBeginsInChunks(t *testing.T) {
	h := newHarness(t, bulkChunks)
	for i := 1; i <= 3; i++ {
		create(t, h, svc(t, fmt.Sprintf("10.96.1.%d:80", i), fmt.Sprintf("10.0.1.%d:8080", i)), lb.ServiceID(i), lb.BackendID(i))
	}
	h.call(&messages.DeleteBatch{Frontends: []lb.L3n4Addr{mustAddr(t, "10.96.1.1:80"), mustAddr(t, "10.96.1.2:80"), mustAddr(t, "10.96.1.3:80")},
		Reply: make(chan messages.DeleteBatchReply, 1)})
	h.expect("svc4: write [] delete [10.96.1.1:80/TCP#0 10.96.1.1:80/TCP#1 10.96.1.2:80/TCP#0 10.96.1.2:80/TCP#1]")
	h.call(upsert(svc(t, "10.96.9.9:80", "10.0.9.9:8080")))
	h.expect("alloc: acquire service 10.96.9.9:80/TCP backends [10.0.9.9:8080/TCP]") // not behind the deletes
	h.reply("svc4", ok())
	h.reply("alloc", acquired(9, 9))
	h.drain(t)
	h.expectAnswers("upsert: id 9 created true", "delete batch: [id 1 id 2 id 3]")
}

// The window: a single call marks the lane throttled for BulkWindow of
// the core's clock.
func TestBulkLaneIsThrottledForTheWindowAfterASingleCall(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.BulkWindow = time.Minute })
	if h.c.throttled() {
		t.Fatal("throttled before any single call")
	}
	h.call(upsert(svc(t, "10.96.9.1:80", "10.0.9.1:8080")))
	if !h.c.throttled() {
		t.Fatal("not throttled right after a single call")
	}
	h.clock = h.clock.Add(time.Minute)
	if h.c.throttled() {
		t.Fatal("still throttled a window after the single call")
	}
}

// drain answers every request sent and every one the core sends next as
// a healthy child would, with fresh IDs from 100 on, until it sends
// nothing more. It returns the allocator's acquire requests it answered
// after the first round, printed, in the order the core sent them.
func (h *harness) drain(t *testing.T) []string {
	t.Helper()
	a := &autoChildren{c: h.c, nextID: 100}
	var acquires []string
	for range 100 {
		n := 0
		for child, q := range h.sent {
			for range q {
				h.reply(child, func(r messages.Request) any { return a.answer(r) })
				n++
			}
		}
		for _, out := range h.c.Ready().Requests {
			messages.EachRequest(out.Msg, func(m any) {
				r := m.(messages.Request)
				h.sent[out.Child] = append(h.sent[out.Child], r)
				if _, ok := r.(*messages.AllocAcquire); ok {
					acquires = append(acquires, out.Child+": "+printRequest(r))
				}
				n++
			})
		}
		h.c.Advance()
		if n == 0 {
			return acquires
		}
	}
	t.Fatal("the core kept sending")
	return nil
}

func mustAddr(t *testing.T, s string) lb.L3n4Addr {
	t.Helper()
	a, err := lb.ParseL3n4Addr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The outbox is urgent while it holds a request of an op of urgentKeys
// queue keys or more (a batch's run: its children may start at once),
// not for a single call's op, and no longer once sent.
func TestOutboxIsUrgentWithALargeOpsRequestsUntilSent(t *testing.T) {
	h := newHarness(t)
	n := urgentKeys/2 + 1 // services of one backend: two keys each
	h.call(batchOf(t, 1, n))
	if !h.c.Urgent() {
		t.Fatalf("not urgent with the acquire of a run of %d keys", 2*n)
	}
	h.expectAny()
	if h.c.Urgent() {
		t.Fatal("still urgent once the outbox was sent")
	}
	h.flushAnswering(t)
	h.call(upsert(svc(t, "10.96.9.1:80", "10.0.9.1:8080")))
	if h.c.Urgent() {
		t.Fatal("urgent with a single call's acquire")
	}
	h.flushAnswering(t)
	if got := len(h.answered); got != 2 {
		t.Fatalf("%d calls answered, want 2", got)
	}
}

// Updates join runs like new services, and such a run is cut into chunks
// too while single calls are about: each chunk one op (one acquire for
// its fresh backends), one in flight; the answer has every result.
func TestScriptBatchOfUpdatesBeginsInChunks(t *testing.T) {
	h := newHarness(t, bulkChunks)
	h.call(batchOf(t, 1, 4))
	h.expect(acquireLine(1, 1, 2, 3, 4)) // alone: one op
	h.drain(t)
	h.expectAnswers("upsert batch: [id 101 created true id 103 created true id 105 created true id 107 created true]")
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // the lane is throttled
	m := batchOf(t, 1, 4)
	for i, s := range m.Services {
		s.Backends = append(s.Backends, svc(t, "10.96.0.1:80", fmt.Sprintf("10.0.2.%d:8080", i+1)).Backends...)
	}
	h.call(m)
	require.Equal(t, []string{
		"alloc: acquire backends [10.0.2.1:8080/TCP]; backends [10.0.2.2:8080/TCP]",
		"alloc: acquire backends [10.0.2.3:8080/TCP]; backends [10.0.2.4:8080/TCP]",
	}, h.drain(t))
	h.expectAnswers("upsert batch: [id 101 created false id 103 created false id 105 created false id 107 created false]")
	for _, s := range m.Services {
		id, ok := h.c.byFE.Get(s.Frontend.L3n4Addr)
		require.True(t, ok)
		require.Len(t, h.c.services.get(id).Spec.Backends, 2, "%s", s.Frontend.L3n4Addr)
	}
}
