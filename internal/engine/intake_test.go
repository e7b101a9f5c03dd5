package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// wideLane admits a whole chunk of the intake at once (one in flight
// and room for another), so that the next chunk is due at once.
func wideLane(c *Config) { c.BulkChunk, c.BulkInFlight = intakeChunk, 2 }

// queuedFrontends counts the frontends of net 10.96.<net>.* in the core's
// queues (batchOf's services taken in).
func queuedFrontends(h *harness, net byte) int {
	n := 0
	for k := range h.c.queues.all {
		if !k.backend && k.Addr().As4()[2] == net {
			n++
		}
	}
	return n
}

// While single calls are about, a large UpsertBatch is taken in
// intakeChunk services per Step: the rest waits for TakeIn, which the
// actor steps after the messages that came meanwhile. A single Upsert
// stepped in between goes out at once.
func TestScriptLargeBatchIsTakenInAChunkPerStepWhileSingleCallsAreAbout(t *testing.T) {
	h := newHarness(t, wideLane)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // a single call: throttled
	h.call(batchOf(t, 1, intakeChunk+4))
	require.NotEmpty(t, h.c.intake)
	require.Equal(t, intakeChunk, queuedFrontends(h, 1))
	require.True(t, h.c.HasIntake(), "the chunk is admitted whole: the next one is due")
	h.expectAny() // the chunk's requests
	h.call(upsert(svc(t, "10.96.9.2:80", "10.0.9.2:8080")))
	h.expect("alloc: acquire service 10.96.9.2:80/TCP backends [10.0.9.2:8080/TCP]")
	h.step(TakeIn{})
	require.Empty(t, h.c.intake)
	require.Equal(t, intakeChunk+4, queuedFrontends(h, 1))
	h.step(TakeIn{}) // a stale TakeIn does nothing
	require.Equal(t, intakeChunk+4, queuedFrontends(h, 1))
}

// With no single call about, a batch of up to largeCall services is taken
// in whole.
func TestScriptLargeBatchIsTakenInWholeWithNoSingleCallAbout(t *testing.T) {
	h := newHarness(t)
	h.call(batchOf(t, 1, intakeChunk+4))
	require.Empty(t, h.c.intake)
	require.Equal(t, intakeChunk+4, queuedFrontends(h, 1))
}

// largeBatchOf returns an UpsertBatch of n services of one backend each,
// frontends 10.97.<i/256>.<i%256>:80 (i from 1).
func largeBatchOf(t *testing.T, n int) *messages.UpsertBatch {
	t.Helper()
	m := &messages.UpsertBatch{Reply: make(chan messages.UpsertBatchReply, 1)}
	for i := 1; i <= n; i++ {
		m.Services = append(m.Services, svc(t, fmt.Sprintf("10.97.%d.%d:80", i>>8, i&255), fmt.Sprintf("10.1.%d.%d:8080", i>>8, i&255)))
	}
	return m
}

// queuedLarge counts the frontends of 10.97.0.0/16 in the core's queues
// (largeBatchOf's services taken in).
func queuedLarge(h *harness) int {
	n := 0
	for k := range h.c.queues.all {
		if a := k.Addr().As4(); !k.backend && a[0] == 10 && a[1] == 97 {
			n++
		}
	}
	return n
}

// expectLargeChunks checks that the call just stepped, of n services or
// frontends (more than 2·largeChunk, at most 3·largeChunk), is taken in
// largeChunk per Step, counted by queued: the first chunk's requests are
// ready before the next chunk is taken in, and the next one is due at
// once (nothing throttles the lane).
func expectLargeChunks(t *testing.T, h *harness, n int, queued func(*harness) int) {
	t.Helper()
	require.NotEmpty(t, h.c.intake)
	require.Equal(t, largeChunk, queued(h))
	require.True(t, h.c.HasIntake(), "not throttled: the next chunk is due at once")
	require.Positive(t, h.expectAny(), "the first chunk's requests are ready")
	h.step(TakeIn{})
	require.Equal(t, 2*largeChunk, queued(h))
	h.step(TakeIn{})
	require.Empty(t, h.c.intake)
	require.False(t, h.c.HasIntake())
	require.Equal(t, n, queued(h))
}

// With no single call about, a batch of more than largeCall services is
// taken in largeChunk services per Step, the first chunk's requests ready
// before the next is taken in: the children write a chunk while the
// supervisor takes in the next.
func TestScriptVeryLargeBatchIsTakenInLargeChunksWithNoSingleCallAbout(t *testing.T) {
	h := newHarness(t)
	n := largeCall + 4
	h.call(largeBatchOf(t, n))
	expectLargeChunks(t, h, n, queuedLarge)
}

// With no single call about, a Sync of more than largeCall services is
// taken in largeChunk services per Step too, and the deletes of what it
// finds stale start after its last chunk.
func TestScriptVeryLargeSyncIsTakenInLargeChunksAndDeletesWhatIsStaleAfterIt(t *testing.T) {
	h := newHarness(t)
	h.call(batchOf(t, 9, 2)) // of the sync's source, not desired: stale (a batch: not throttled)
	n := largeCall + 4
	h.call(syncOf(largeBatchOf(t, n)))
	require.Equal(t, largeChunk, queuedLarge(h))
	require.Zero(t, queuedDeletes(h, 9), "the stale frontends wait for the last chunk")
	h.step(TakeIn{})
	h.step(TakeIn{})
	require.Empty(t, h.c.intake)
	require.Equal(t, n, queuedLarge(h))
	require.Equal(t, 2, queuedDeletes(h, 9))
}

// A core that stops while a batch is being taken in answers every one of
// its services: those queued and those not yet taken in.
func TestScriptStopAnswersTheServicesNotYetTakenIn(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1)
	m := batchOf(t, 1, intakeChunk+4)
	h.call(m)
	require.NotEmpty(t, h.c.intake)
	errGone := errors.New("engine gone")
	h.step(Stop{Err: errGone})
	require.Empty(t, h.c.intake)
	require.Len(t, h.answered, 1, "the batch is answered once")
	require.Equal(t, intakeChunk+4, strings.Count(h.answered[0], "engine gone"), h.answered[0])
}

// syncOf returns a Sync of source API with the services of m.
func syncOf(m *messages.UpsertBatch) *messages.Sync {
	return &messages.Sync{Source: lb.SourceAPI, Desired: m.Services, Reply: make(chan messages.SyncReply, 1)}
}

// deletesOn counts the delete ops queued on the frontends whose IPv4
// address in accepts: entries (one a frontend) and distinct ops.
func deletesOn(h *harness, in func(a [4]byte) bool) (entries, ops int) {
	seen := map[*op]bool{}
	for k, q := range h.c.queues.all {
		if k.backend || !in(k.Addr().As4()) {
			continue
		}
		for o := range q.all {
			if _, ok := o.plan.(*deletePlan); ok {
				entries++
				seen[o] = true
			}
		}
	}
	return entries, len(seen)
}

// queuedDeletes counts the delete ops queued on frontends of net
// 10.96.<net>.*.
func queuedDeletes(h *harness, net byte) int {
	n, _ := deletesOn(h, func(a [4]byte) bool { return a[2] == net })
	return n
}

// While single calls are about, a large Sync is taken in like a large
// batch, a chunk of its services per Step; the deletes of the frontends
// it finds stale when it comes start after its last chunk.
func TestScriptLargeSyncIsTakenInAChunkPerStepAndDeletesWhatIsStaleAfterIt(t *testing.T) {
	h := newHarness(t, wideLane)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // a single call: throttled; stale for the sync
	h.call(syncOf(batchOf(t, 1, intakeChunk+4)))
	require.NotEmpty(t, h.c.intake)
	require.Equal(t, intakeChunk, queuedFrontends(h, 1))
	require.Zero(t, queuedDeletes(h, 9), "the stale frontend waits for the last chunk")
	require.True(t, h.c.HasIntake())
	h.step(TakeIn{})
	require.Empty(t, h.c.intake)
	require.Equal(t, intakeChunk+4, queuedFrontends(h, 1))
	require.Equal(t, 1, queuedDeletes(h, 9))
}

// A Sync finds stale what every call before it left: the calls still
// being taken in when it comes are taken in whole first, so the services
// of a batch that came before it, of its source and not desired, are
// deleted, all of them.
func TestScriptSyncTakesInTheCallsBeforeItFirst(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // throttled
	h.call(batchOf(t, 1, intakeChunk+4))
	require.NotEmpty(t, h.c.intake)
	h.call(syncOf(batchOf(t, 2, 1)))
	require.Equal(t, intakeChunk+4, queuedFrontends(h, 1))
	// What is left to take in is the sync's stale frontends, a chunk
	// per Step as single calls are about: the batch's twenty (every
	// service of it is stale) and the single call's.
	require.Len(t, h.c.intake, 1)
	require.Equal(t, intakeChunk+4+1, h.c.intake[0].n)
	require.Equal(t, intakeChunk, queuedDeletes(h, 1)+queuedDeletes(h, 9))
	h.c.drainIntake()
	require.Equal(t, intakeChunk+4, queuedDeletes(h, 1), "every service of the batch is stale")
	require.Equal(t, 1, queuedDeletes(h, 9))
}

// A core that stops while a Sync is being taken in answers it once, with
// the error for each of its services and for each stale frontend.
func TestScriptStopAnswersASyncBeingTakenInOnce(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1)
	h.call(syncOf(batchOf(t, 1, intakeChunk+4)))
	require.NotEmpty(t, h.c.intake)
	h.step(Stop{Err: errors.New("engine gone")})
	require.Empty(t, h.c.intake)
	require.Len(t, h.answered, 1, "the sync is answered once")
	require.Equal(t, intakeChunk+4+1, strings.Count(h.answered[0], "engine gone"), h.answered[0])
	require.Contains(t, h.answered[0], "delete service 10.96.9.1:80/TCP: engine gone")
}

// A core that stops while a Sync's stale frontends are being taken in
// answers the sync once, with the error for each stale frontend: those
// taken in (aborted in their queues) and those not yet.
func TestScriptStopAnswersASyncWhoseDeletesAreBeingTakenInOnce(t *testing.T) {
	h := newHarness(t, bulkChunks)
	for i := 1; i <= intakeChunk+4; i++ {
		create(t, h, svc(t, fmt.Sprintf("10.96.1.%d:80", i), fmt.Sprintf("10.0.1.%d:8080", i)), lb.ServiceID(i), lb.BackendID(i)) // single calls: throttled
	}
	h.answered = nil
	h.call(syncOf(&messages.UpsertBatch{})) // every service is stale
	require.NotEmpty(t, h.c.intake, "the deletes are taken in a chunk per Step")
	h.step(Stop{Err: errors.New("engine gone")})
	require.Empty(t, h.c.intake)
	require.Len(t, h.answered, 1, "the sync is answered once")
	require.Equal(t, intakeChunk+4, strings.Count(h.answered[0], "engine gone"), h.answered[0])
}

// deleteBatchOf returns a DeleteBatch of frontends 10.96.<net>.i:80, for
// i in 1..n.
func deleteBatchOf(t *testing.T, net, n int) *messages.DeleteBatch {
	t.Helper()
	m := &messages.DeleteBatch{Reply: make(chan messages.DeleteBatchReply, 1)}
	for i := 1; i <= n; i++ {
		m.Frontends = append(m.Frontends, svc(t, fmt.Sprintf("10.96.%d.%d:80", net, i)).Frontend.L3n4Addr)
	}
	return m
}

// While single calls are about, a large DeleteBatch is taken in like a
// large UpsertBatch, a chunk of its frontends per Step. (Its frontends
// have no service: each delete is answered as soon as it is taken in.)
func TestScriptLargeDeleteBatchIsTakenInAChunkPerStepWhileSingleCallsAreAbout(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // throttled
	h.answered = nil
	h.call(deleteBatchOf(t, 1, intakeChunk+4))
	require.NotEmpty(t, h.c.intake)
	require.Equal(t, intakeChunk, h.c.intake[0].next, "the first chunk is taken in")
	require.Empty(t, h.answered, "the rest is not")
	h.step(TakeIn{})
	require.Empty(t, h.c.intake)
	require.Len(t, h.answered, 1)
	require.Equal(t, intakeChunk+4, strings.Count(h.answered[0], "service not found"), h.answered[0])
}

// inLarge accepts the addresses of 10.97.0.0/16 (largeBatchOf's
// frontends).
func inLarge(a [4]byte) bool { return a[0] == 10 && a[1] == 97 }

// queuedLargeDeletes counts the delete ops queued on largeBatchOf's
// frontends.
func queuedLargeDeletes(h *harness) int {
	n, _ := deletesOn(h, inLarge)
	return n
}

// createLarge creates largeBatchOf's n services in h's core, every child
// answering, and returns the batch; h.answered is left empty.
func createLarge(t *testing.T, h *harness, n int) *messages.UpsertBatch {
	t.Helper()
	up := largeBatchOf(t, n)
	h.call(up)
	for h.c.HasIntake() {
		h.step(TakeIn{})
	}
	h.flushAnswering(t)
	require.Len(t, h.answered, 1)
	require.Zero(t, strings.Count(h.answered[0], "err"), h.answered[0])
	require.Equal(t, n, h.c.services.len())
	h.answered = nil
	return up
}

// With no single call about, a DeleteBatch of more than largeCall
// frontends is taken in largeChunk frontends per Step, as a large
// UpsertBatch is: the first chunk's requests are ready before the next is
// taken in, so that the children delete its entries meanwhile. Every
// service is deleted and the call answered once.
func TestScriptVeryLargeDeleteBatchIsTakenInLargeChunksWithNoSingleCallAbout(t *testing.T) {
	h := newHarness(t)
	n := largeCall + 4
	up := createLarge(t, h, n)
	del := &messages.DeleteBatch{Reply: make(chan messages.DeleteBatchReply, 1)}
	for _, s := range up.Services {
		del.Frontends = append(del.Frontends, s.Frontend.L3n4Addr)
	}
	h.call(del)
	expectLargeChunks(t, h, n, queuedLargeDeletes)
	h.flushAnswering(t)
	require.Len(t, h.answered, 1, "the batch is answered once")
	require.Zero(t, h.c.services.len(), "every service is deleted")
	require.Zero(t, queuedLargeDeletes(h))
}

// deleteOpsOnLarge counts the distinct delete ops queued on
// largeBatchOf's frontends.
func deleteOpsOnLarge(h *harness) int {
	_, ops := deletesOn(h, inLarge)
	return ops
}

// A Sync that finds more than largeCall frontends stale deletes them as a
// DeleteBatch would: in runs, one op each, not one op a frontend, taken
// in largeChunk per Step with no single call about.
func TestScriptSyncDeletesManyStaleFrontendsInRunsTakenInLargeChunks(t *testing.T) {
	h := newHarness(t)
	n := largeCall + 4
	createLarge(t, h, n)
	h.call(syncOf(&messages.UpsertBatch{})) // nothing desired: every service is stale
	require.Equal(t, 1, deleteOpsOnLarge(h), "the first chunk is one run")
	expectLargeChunks(t, h, n, queuedLargeDeletes)
	require.Equal(t, 3, deleteOpsOnLarge(h))
	h.flushAnswering(t)
	require.Len(t, h.answered, 1, "the sync is answered once")
	require.Contains(t, h.answered[0], fmt.Sprintf("deleted %d", n))
	require.Zero(t, h.c.services.len())
}

// A core that stops while a DeleteBatch is being taken in answers it
// once, with a result for each frontend: those taken in have theirs (no
// service here), those not taken in the Stop's error.
func TestScriptStopAnswersADeleteBatchBeingTakenInOnce(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1)
	h.call(deleteBatchOf(t, 1, intakeChunk+4))
	require.NotEmpty(t, h.c.intake)
	h.step(Stop{Err: errors.New("engine gone")})
	require.Empty(t, h.c.intake)
	require.Len(t, h.answered, 1, "the batch is answered once")
	require.Equal(t, intakeChunk+4, strings.Count(h.answered[0], "delete service "), h.answered[0])
	require.Equal(t, intakeChunk, strings.Count(h.answered[0], "service not found"), h.answered[0])
	require.Equal(t, 4, strings.Count(h.answered[0], "engine gone"), h.answered[0])
	require.Contains(t, h.answered[0], "delete service 10.96.1.20:80/TCP: engine gone")
}

// The intake keeps just ahead of admission: the next chunk of a call is
// ready to take in (HasIntake) only when its lane has nothing left
// waiting for admission, so the supervisor spreads a large call's work
// over the time its chunks take to run instead of doing it all first.
func TestScriptIntakeWaitsForItsLaneToBeAdmitted(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.BulkChunk, c.BulkInFlight = 8, 1 })
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // throttled
	h.call(batchOf(t, 1, intakeChunk+4))
	require.NotEmpty(t, h.c.intake)
	require.False(t, h.c.HasIntake(), "half the first chunk waits for admission")
	h.flushAnswering(t) // the chunk's two halves run in turn
	require.True(t, h.c.HasIntake(), "nothing of the call waits: the next chunk is due")
	h.step(TakeIn{})
	require.Empty(t, h.c.intake)
}

// Each call being taken in keeps its own pace: a batch that comes while
// a large one waits for admission is taken in at once, not behind the
// rest of the first, and its chunks are admitted in turn with the first
// one's.
func TestScriptIntakeOfOneCallDoesNotWaitForAnother(t *testing.T) {
	h := newHarness(t, bulkChunks)
	create(t, h, svc(t, "10.96.9.1:80", "10.0.9.1:8080"), 1, 1) // throttled
	h.call(batchOf(t, 1, intakeChunk+4))
	require.False(t, h.c.HasIntake(), "the first call's chunk waits for admission")
	h.call(batchOf(t, 2, intakeChunk+1))
	require.Len(t, h.c.intake, 2)
	require.Equal(t, intakeChunk, queuedFrontends(h, 1))
	require.Equal(t, intakeChunk, queuedFrontends(h, 2), "the second call's first chunk is taken in at once")
	require.False(t, h.c.HasIntake())
}
