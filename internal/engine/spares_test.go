package engine

import (
	"fmt"
	"testing"

	"github.com/actorlb/actorlb/internal/benchset"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

func TestSparesLendTheSmallestSliceWithRoomWithinTheirBounds(t *testing.T) {
	var s spares[int]
	require.Nil(t, s.take(0), "nothing to hold: no slice")
	fresh := s.take(5)
	require.Equal(t, 0, len(fresh))
	require.Equal(t, 5, cap(fresh), "nothing kept: a new slice of the size asked")

	small, mid, big := make([]int, 3, 10), make([]int, 7, 100), make([]int, 0, 1000)
	s.give(big)
	s.give(small)
	s.give(mid)
	require.Equal(t, 1110, s.room)

	got := s.take(50)
	require.Equal(t, 0, len(got), "a kept slice comes back empty")
	require.Equal(t, 100, cap(got), "the smallest with room")
	require.Same(t, &mid[:1][0], &got[:1][0])
	got = s.take(10)
	require.Same(t, &small[:1][0], &got[:1][0])
	got = s.take(1001)
	require.Equal(t, 1001, cap(got), "none has room: a new one")
	require.Equal(t, 1000, s.room, "the big one is still kept")

	// The bounds: room summed over the slices, and their count.
	s.give(make([]int, 0, sparesEntries-1000+1))
	require.Equal(t, 1000, s.room, "a slice past the room bound is left to the collector")
	s = spares[int]{}
	for range sparesKept + 3 {
		s.give(make([]int, 0, 1))
	}
	require.Len(t, s.free, sparesKept)
	require.Equal(t, sparesKept, s.room)
	s.give(nil)
	require.Len(t, s.free, sparesKept)
}

// A rest drops the slices that were not given back since the last one,
// the largest first, until what is kept is within sparesIdle, and keeps
// those given back; a trim drops any, the largest first.
func TestARestDropsTheLargeSparesNotGivenBackSinceTheLastRest(t *testing.T) {
	var s spares[int]
	for _, n := range []int{300, 10, 200} {
		s.give(make([]int, 0, n))
	}
	s.rest()
	require.Equal(t, 510, s.room, "all given back since the last rest: kept")
	got := s.take(150) // the 200 one
	s.give(got)
	s.give(make([]int, 0, 1000))
	s.rest()
	require.Equal(t, 1200, s.room, "the 300 and 10 ones, unused, went (the used ones alone are past the bound)")
	require.Len(t, s.used, 2)
	s.rest()
	require.Equal(t, 200, s.room, "the 1,000 one, unused for a period, went first; then within the bound")
	require.False(t, s.large())
	s.give(make([]int, 0, 400))
	s.trim()
	require.Equal(t, 200, s.room, "a trim drops what was used too, the largest first")
	s.give(make([]int, 0, 100))
	s.trim()
	require.Equal(t, 100, s.room)
	var caps []int
	for _, xs := range s.free {
		caps = append(caps, cap(xs))
	}
	require.ElementsMatch(t, []int{100}, caps)
}

// At rest (no op in flight) the core keeps the spares its last ops gave
// back, for the next ops, and drops those they did not use: a single
// upsert after a large op leaves with its own small arrays only.
func TestAtRestTheCoreKeepsTheSparesItsLastOpsUsed(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080"), 1, 1)
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.2.1:8080")))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends [10.0.2.1:8080/TCP]")
	// A large op's arrays come back while this one is in flight.
	h.c.spares.svcWrites.give(make([]maps.ServiceEntry, 0, 1024))
	h.c.spares.beWrites.give(make([]maps.BackendEntry, 0, 1024))
	h.reply("alloc", acquired(2, 2))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created true")
	require.Zero(t, h.c.stats().OpsInFlight)
	require.Equal(t, 1024+2, h.c.spares.svcWrites.room, "given back since the last rest: kept with the op's own")
	require.Equal(t, 1024+1, h.c.spares.beWrites.room)

	h.call(upsert(svc(t, "10.96.0.3:80", "10.0.3.1:8080")))
	h.expect("alloc: acquire service 10.96.0.3:80/TCP backends [10.0.3.1:8080/TCP]")
	h.reply("alloc", acquired(3, 3))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 3 created true")
	require.Zero(t, h.c.stats().OpsInFlight)
	require.Equal(t, 2, h.c.spares.svcWrites.room, "the large array sat unused: gone; the op's own is kept")
	require.Equal(t, 1, h.c.spares.beWrites.room)
}

// Quiet (the engine had no input for a while) trims what the core keeps
// for reuse to what an engine at rest keeps, used or not, and the core
// rests no longer; with an op in flight it does nothing.
func TestQuietTrimsTheSparesToWhatAnEngineAtRestKeeps(t *testing.T) {
	h := newHarness(t)
	create(t, h, svc(t, "10.96.0.1:80", "10.0.1.1:8080"), 1, 1)
	require.False(t, h.c.Resting(), "small spares: nothing to trim")
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.2.1:8080")))
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends [10.0.2.1:8080/TCP]")
	h.c.spares.svcWrites.give(make([]maps.ServiceEntry, 0, 1024))
	require.False(t, h.c.Resting(), "an op in flight")
	h.step(Quiet{})
	require.Equal(t, 1024+2, h.c.spares.svcWrites.room, "Quiet with an op in flight trims nothing")
	h.reply("alloc", acquired(2, 2))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 2 created true")
	require.True(t, h.c.Resting(), "at rest with the large array, given back since the last rest, kept")
	h.step(Quiet{})
	require.False(t, h.c.Resting())
	require.Equal(t, 2, h.c.spares.svcWrites.room, "the ops' own small array is kept (the second filled the first's)")
	require.Equal(t, 2+1+1, h.c.stats().SpareEntries, "service, backend and revNAT writes")
}

// Bulk calls come in waves whose ops all complete (the engine at rest for
// a moment) before the callers' next calls: the next wave writes in the
// arrays the last one gave back, however large.
func TestTheNextWaveOfBulkOpsWritesInTheLastOnesArrays(t *testing.T) {
	c, a := startedCore()
	svcs := benchset.Sequential(160, 10)
	var arrays [2][]*maps.ServiceEntry // the service writes' arrays of each wave
	wave := 0
	a.sent = func(r messages.Request) {
		if m, ok := r.(*messages.ServiceApply); ok && len(m.Writes) > 0 {
			arrays[wave] = append(arrays[wave], &m.Writes[:1][0])
		}
	}
	for ; wave < 2; wave++ {
		stepWave(t, c, a, svcs[wave*80:wave*80+80])
	}
	require.Len(t, arrays[0], 2, "one service write a call")
	require.ElementsMatch(t, arrays[0], arrays[1], "the second wave's service writes are in the first one's arrays")
}

// A bulk op asks the allocator for its services' IDs in items the last
// wave's asks gave back once answered, and the items kept for that hold
// nothing of the services they named.
func TestTheNextWaveOfBulkOpsAsksForIDsInTheLastOnesItems(t *testing.T) {
	c, a := startedCore()
	svcs := benchset.Sequential(160, 10)
	var arrays [2][]*messages.AcquireItem // the multi-item asks' arrays of each wave
	asked := 0
	wave := 0
	a.sent = func(r messages.Request) {
		if m, ok := r.(*messages.AllocAcquire); ok && len(m.Items) > 1 {
			arrays[wave] = append(arrays[wave], &m.Items[0])
			asked += len(m.Items)
		}
	}
	for ; wave < 2; wave++ {
		stepWave(t, c, a, svcs[wave*80:wave*80+80])
	}
	require.NotEmpty(t, arrays[0], "the first wave asked for IDs for many services at once")
	require.Greater(t, asked, 80, "most services of the waves asked the allocator")
	require.ElementsMatch(t, arrays[0], arrays[1], "the second wave's asks are in the first one's items")
	require.NotEmpty(t, c.spares.acquires.free)
	for _, xs := range c.spares.acquires.free {
		for _, it := range xs[:cap(xs)] {
			require.Zero(t, it, "an item kept for reuse still names a service's backends")
		}
	}
}

// An ask for IDs hands the allocator back an answer the core has folded
// (AllocAcquire.Reuse), for its next answer: the second wave's asks
// carry the first one's answers, and every service still gets IDs of its
// own (an answer handed back before it was folded would have had its IDs
// overwritten by the next).
func TestTheNextWaveOfBulkOpsHandsTheAllocatorBackItsAnswers(t *testing.T) {
	c, a := startedCore()
	svcs := benchset.Sequential(160, 10)
	answers := map[*messages.AllocAcquired]int{} // the wave each answer was made in
	wave, reused := 0, 0
	a.sent = func(r messages.Request) {
		if m, ok := r.(*messages.AllocAcquire); ok && m.Reuse != nil {
			w, ok := answers[m.Reuse]
			require.True(t, ok, "an ask hands back something not an answer")
			if w < wave {
				reused++
			}
		}
	}
	a.answered = func(r any) {
		if rep, ok := r.(*messages.AllocAcquired); ok {
			if _, seen := answers[rep]; !seen {
				answers[rep] = wave
			}
		}
	}
	for ; wave < 2; wave++ {
		stepWave(t, c, a, svcs[wave*80:wave*80+80])
	}
	require.NotZero(t, reused, "the second wave handed back none of the first one's answers")
	ids := map[lb.BackendID]bool{}
	svcIDs := map[lb.ServiceID]bool{}
	for _, s := range svcs {
		id, ok := c.byFE.Get(s.Frontend.L3n4Addr)
		require.True(t, ok)
		require.False(t, svcIDs[id], "service ID %d twice", id)
		svcIDs[id] = true
		got := c.services.get(id)
		require.Len(t, got.BackendIDs, 10)
		for _, b := range got.BackendIDs {
			require.NotZero(t, b)
			require.False(t, ids[b], "backend ID %d given to two backends", b)
			ids[b] = true
		}
	}
	c.Step(Quiet{})
	require.Empty(t, c.spares.answers, "a quiet core keeps answers")
}

// stepWave steps a wave of bulk calls, two calls of half of svcs each in
// flight at once, lets the children answer everything, and requires
// every service upserted and the core at rest.
func stepWave(t *testing.T, c *Core, a *autoChildren, svcs []*lb.Service) {
	t.Helper()
	var replies []chan messages.UpsertBatchReply
	half := len(svcs) / 2
	for _, call := range [][]*lb.Service{svcs[:half], svcs[half:]} {
		r := make(chan messages.UpsertBatchReply, 1)
		replies = append(replies, r)
		c.Step(&messages.UpsertBatch{Services: call, Reply: r})
	}
	a.settle()
	for _, r := range replies {
		require.Len(t, r, 1, "a call not answered once the core settled")
		for _, res := range (<-r).Results {
			require.NoError(t, res.Err)
		}
	}
	require.Zero(t, c.stats().OpsInFlight, "not at rest after the wave")
}

// sameArray reports whether a and b share their first element's memory.
func sameArray[E any](a, b []E) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0]
}

// An answered write request's slices hold the next op's entries: the
// second upsert's backend, revNAT and service writes are made in the
// first one's arrays (and say the second one's entries).
func TestAnsweredWritesAreFilledAgainByTheNextOp(t *testing.T) {
	h := newHarness(t)
	first := h.upsertCapturing(t, "10.96.0.1:80", []string{"10.0.1.1:8080", "10.0.1.2:8080"}, 1, 1, 2,
		"be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]",
		"svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]")
	second := h.upsertCapturing(t, "10.96.0.2:80", []string{"10.0.2.1:8080", "10.0.2.2:8080"}, 2, 3, 4,
		"be4: write [3=10.0.2.1:8080 4=10.0.2.2:8080]", "revnat: write [2=10.96.0.2:80]",
		"svc4: write [10.96.0.2:80/TCP#1 10.96.0.2:80/TCP#2 10.96.0.2:80/TCP#0]")
	require.True(t, sameArray(first.be, second.be), "backend writes in a new array")
	require.True(t, sameArray(first.rev, second.rev), "revNAT writes in a new array")
	require.True(t, sameArray(first.svc, second.svc), "service writes in a new array")

	// A delete's service keys are lent too: the next delete's are made
	// in the same array.
	var dels [][]maps.ServiceKey
	for _, fe := range []string{"10.96.0.1:80", "10.96.0.2:80"} {
		h.call(deleteFE(t, fe))
		h.expect("svc4: write [] delete [" + fe + "/TCP#0 " + fe + "/TCP#1 " + fe + "/TCP#2]")
		dels = append(dels, h.sent[ChildService4][0].(*messages.ServiceApply).Deletes)
		h.flushAnswering(t)
	}
	require.True(t, sameArray(dels[0], dels[1]), "service deletes in a new array")
}

// A request sent twice (its owner failed, with it or with it queued) is
// never lent again: the first copy may be answered while the second is
// still in the owner's mailbox, so its arrays stay the request's.
func TestARequestSentTwiceIsNeverFilledAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failed bool // the owner failed on this request (else on another, with it queued)
	}{{"failed on it", true}, {"failed with it queued", false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			const write1 = "svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]"
			sent := h.upsertToServiceWrite(t, "10.96.0.1:80", "10.0.1.1:8080", 1)
			failed := ChildFailed{Child: ChildService4}
			if tc.failed {
				failed.Failed = sent
			}
			h.step(failed)
			h.expect(write1)             // sent again, the same request
			h.reply(ChildService4, ok()) // the first copy's answer
			h.reply(ChildService4, ok()) // the second's, ignored
			h.expectAnswers("upsert: id 1 created true")

			next := h.upsertToServiceWrite(t, "10.96.0.2:80", "10.0.2.1:8080", 2)
			require.False(t, sameArray(sent.Writes, next.Writes), "a request sent twice was filled again")
			require.Equal(t, write1, ChildService4+": "+printRequest(sent), "the request sent twice changed")
			h.reply(ChildService4, ok())
			h.expectAnswers("upsert: id 2 created true")
		})
	}
}

// upsertToServiceWrite creates fe with one backend be (service ID and
// backend ID id) up to its service write, sent and not answered, which
// it returns.
func (h *harness) upsertToServiceWrite(t *testing.T, fe, be string, id int) *messages.ServiceApply {
	t.Helper()
	h.call(upsert(svc(t, fe, be)))
	h.expect(fmt.Sprintf("alloc: acquire service %s/TCP backends [%s/TCP]", fe, be))
	h.reply("alloc", acquired(lb.ServiceID(id), lb.BackendID(id)))
	h.expect(fmt.Sprintf("be4: write [%d=%s]", id, be), fmt.Sprintf("revnat: write [%d=%s]", id, fe))
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect(fmt.Sprintf("svc4: write [%s/TCP#1 %s/TCP#0]", fe, fe))
	return h.sent[ChildService4][0].(*messages.ServiceApply)
}

// lentWrites are the slices of the write requests of one upsert, as
// sent (once answered, a request's lent slices are no longer its).
type lentWrites struct {
	be  []maps.BackendEntry
	rev []maps.RevNATEntry
	svc []maps.ServiceEntry
}

// upsertCapturing creates fe with backends, granted svcID and
// backendIDs, expecting its writes as printed (backends, revNAT, then
// service), and returns the write requests.
func (h *harness) upsertCapturing(t *testing.T, fe string, backends []string, svcID lb.ServiceID, b1, b2 lb.BackendID, beWrite, revWrite, svcWrite string) lentWrites {
	t.Helper()
	var w lentWrites
	h.call(upsert(svc(t, fe, backends...)))
	h.expect("alloc: acquire service " + fe + "/TCP backends [" + backends[0] + "/TCP " + backends[1] + "/TCP]")
	h.reply("alloc", acquired(svcID, b1, b2))
	h.expect(beWrite, revWrite)
	w.be = h.sent[ChildBackend4][0].(*messages.BackendApply).Writes
	w.rev = h.sent[ChildRevNAT][0].(*messages.RevNATApply).Writes
	h.reply(ChildBackend4, ok())
	h.reply(ChildRevNAT, ok())
	h.expect(svcWrite)
	w.svc = h.sent[ChildService4][0].(*messages.ServiceApply).Writes
	h.reply(ChildService4, ok())
	h.expect()
	h.expectAnswers(fmt.Sprintf("upsert: id %d created true", svcID))
	return w
}

// Answered requests are reused for the next ones, but not one whose
// second copy still waits in the outbox (it was sent again after its
// owner failed, and the first copy's answer came before the outbox was
// sent): that copy goes out as it was made.
func TestAnsweredRequestsAreReusedButNotOneWaitingInTheOutbox(t *testing.T) {
	h := newHarness(t)
	const write1 = "svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0]"
	sent := h.upsertToServiceWrite(t, "10.96.0.1:80", "10.0.1.1:8080", 1)
	require.NotEmpty(t, h.c.reqs.spare, "the answered requests of the upsert were kept")
	h.step(ChildFailed{Child: ChildService4, Failed: sent}) // the copy waits in the outbox
	kept := len(h.c.reqs.spare)
	h.reply(ChildService4, ok()) // the first copy's answer, the outbox not sent yet
	h.expectAnswers("upsert: id 1 created true")
	require.Len(t, h.c.reqs.spare, kept, "a request still in the outbox was kept for reuse")
	h.call(upsert(svc(t, "10.96.0.2:80", "10.0.2.1:8080"))) // takes the spare requests
	h.expect("alloc: acquire service 10.96.0.2:80/TCP backends [10.0.2.1:8080/TCP]", write1)
}

// The spare requests are zero when taken and bounded.
func TestSpareRequestsAreZeroAndBounded(t *testing.T) {
	var tb pendingTable
	for range reqsKept + 10 {
		tb.recycle(&pendingReq{sent: true, item: 7, msg: &messages.AllocRestore{}})
	}
	require.Len(t, tb.spare, reqsKept)
	require.Equal(t, pendingReq{}, *tb.take())
	tb.recycle(&pendingReq{item: 7}) // not sent: in an outbox
	require.Len(t, tb.spare, reqsKept-1)
}

// The allocator's answers kept for the next asks are bounded (four, none
// past answerItemsMax items or answerIDsMax backend IDs), make the spares
// large past what an engine at rest keeps (so that Quiet comes), and are
// dropped by a trim; takeAnswer hands each out once.
func TestKeptAnswersAreBoundedAndDroppedWhenQuiet(t *testing.T) {
	var s mapSpares
	answer := func(items, ids int) *messages.AllocAcquired {
		return &messages.AllocAcquired{Items: make([]messages.AcquiredItem, 0, items), IDs: make([]lb.BackendID, 0, ids)}
	}
	s.keepAnswer(answer(answerItemsMax+1, 1))
	s.keepAnswer(answer(1, answerIDsMax+1))
	require.Empty(t, s.answers, "an answer past the bounds was kept")
	small := []*messages.AllocAcquired{answer(10, 100), answer(10, 100), answer(10, 100), answer(10, 100)}
	for _, r := range small {
		s.keepAnswer(r)
	}
	s.keepAnswer(answer(10, 100))
	require.Len(t, s.answers, answersKept)
	require.False(t, s.large(), "four small answers are what an engine at rest may keep")
	require.Equal(t, 40, s.room())
	got := map[*messages.AllocAcquired]bool{}
	for range answersKept {
		r := s.takeAnswer()
		require.NotNil(t, r)
		require.False(t, got[r], "an answer handed out twice")
		got[r] = true
	}
	require.Nil(t, s.takeAnswer())
	s.keepAnswer(answer(sparesIdle+1, 1))
	require.True(t, s.large(), "an answer of more items than an engine at rest keeps")
	s.trim()
	require.Empty(t, s.answers)
	s.keepAnswer(answer(1, answerIDsIdle+1))
	require.True(t, s.large(), "an answer of more backend IDs than an engine at rest keeps")
	s.trim()
	require.Empty(t, s.answers)
	require.False(t, s.large())
}

// An ask for IDs sent twice (the allocator failed on it) keeps its items
// for good (the first copy may be answered while the second is still in
// the allocator's mailbox) and does not hand back an answer a second
// time: the next batch's ask is made in other items, and the answer the
// core keeps is the one it folded.
func TestAnAskSentTwiceIsNeverFilledAgain(t *testing.T) {
	h := newHarness(t)
	batch := func(fe1, be1, fe2, be2 string) {
		h.call(&messages.UpsertBatch{Services: []*lb.Service{svc(t, fe1, be1), svc(t, fe2, be2)}, Reply: make(chan messages.UpsertBatchReply, 1)})
	}
	const ask1 = "alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]; service 10.96.0.2:80/TCP backends [10.0.1.2:8080/TCP]"
	batch("10.96.0.1:80", "10.0.1.1:8080", "10.96.0.2:80", "10.0.1.2:8080")
	h.expect(ask1)
	sent := h.lose("alloc").(*messages.AllocAcquire)
	h.step(ChildFailed{Child: ChildAllocator, Failed: sent})
	h.expect("alloc: restore services [] backends []", ask1) // the same request again
	h.replyTo("alloc", "restore", ok())
	answer := &messages.AllocAcquired{ReqID: sent.ReqID, Items: []messages.AcquiredItem{granted(1, 1), granted(2, 2)}}
	h.replyTo("alloc", "acquire", func(messages.Request) any { return answer })                                      // the first copy's answer
	h.step(&messages.AllocAcquired{ReqID: sent.ReqID, Items: []messages.AcquiredItem{granted(1, 1), granted(2, 2)}}) // the second's, ignored
	h.flushAnswering(t)
	h.expectAnswers("upsert batch: [id 1 created true id 2 created true]")
	require.Equal(t, ask1, "alloc: "+printRequest(sent), "the request sent twice changed")

	batch("10.96.0.3:80", "10.0.1.3:8080", "10.96.0.4:80", "10.0.1.4:8080")
	h.expect("alloc: acquire service 10.96.0.3:80/TCP backends [10.0.1.3:8080/TCP]; service 10.96.0.4:80/TCP backends [10.0.1.4:8080/TCP]")
	next := h.sent[ChildAllocator][0].(*messages.AllocAcquire)
	require.False(t, sameArray(sent.Items, next.Items), "a request sent twice was filled again")
	require.Same(t, answer, next.Reuse, "the next ask hands back the answer the core folded")
	require.Equal(t, ask1, "alloc: "+printRequest(sent))
}
