package actors

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/engine"
	"github.com/actorlb/actorlb/internal/idalloc"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// One AllocAcquire serves its items each alone: a refused item (a wanted
// ID in use, too few backend IDs left) takes nothing, and the items
// around it get their IDs as if it had not been asked; each item's
// backend IDs are its own (no append through one reaches another's).
func TestAllocatorAcquireServesEachItemAlone(t *testing.T) {
	a := &allocatorActor{svc: newServiceIDs(0), be: idalloc.NewSpace[lb.BackendID](3)}
	fe := func(s string) lb.L3n4Addr {
		t.Helper()
		addr, err := lb.ParseL3n4Addr(s)
		if err != nil {
			t.Fatal(err)
		}
		return addr
	}
	bes := func(n int) []lb.Backend {
		out := make([]lb.Backend, n)
		for i := range out {
			out[i].L3n4Addr = fe("10.0.1.1:80")
		}
		return out
	}
	if _, err := a.svc.AcquireID(fe("10.96.0.9:80"), 7); err != nil {
		t.Fatal(err)
	}
	rep := a.acquire(&messages.AllocAcquire{ReqID: 5, Items: []messages.AcquireItem{
		{Service: true, Frontend: fe("10.96.0.1:80"), Backends: bes(2)},
		{Service: true, Frontend: fe("10.96.0.2:80"), WantID: 7, Backends: bes(1)}, // 7 is in use
		{Service: true, Frontend: fe("10.96.0.3:80"), Backends: bes(2)},            // one backend ID left
		{Service: true, Frontend: fe("10.96.0.4:80"), Backends: bes(1)},
		{Frontend: fe("10.96.0.1:80")}, // an update asking nothing new
	}})
	if rep.ReqID != 5 || len(rep.Items) != 5 {
		t.Fatalf("reply %d with %d items, want 5 with 5", rep.ReqID, len(rep.Items))
	}
	first, wanted, short, last, none := rep.Items[0], rep.Items[1], rep.Items[2], rep.Items[3], rep.Items[4]
	if first.Err != nil || first.ServiceID != 1 || len(first.BackendIDs) != 2 || first.BackendIDs[0] != 1 || first.BackendIDs[1] != 2 {
		t.Fatalf("first item: %+v, want service 1 backends [1 2]", first)
	}
	if !errors.Is(wanted.Err, engine.ErrServiceIDInUse) || wanted.ServiceID != 0 || wanted.BackendIDs != nil {
		t.Fatalf("wanted ID in use: %+v, want ErrServiceIDInUse and nothing taken", wanted)
	}
	if !errors.Is(short.Err, idalloc.ErrIDSpaceExhausted) || short.ServiceID != 0 || short.BackendIDs != nil {
		t.Fatalf("short of backend IDs: %+v, want ErrIDSpaceExhausted and nothing taken", short)
	}
	if _, _, ok := a.svc.Lookup(fe("10.96.0.3:80")); ok {
		t.Fatal("the refused item kept its service ID")
	}
	if last.Err != nil || last.ServiceID == 0 || last.ServiceID == 1 || last.ServiceID == 7 || len(last.BackendIDs) != 1 || last.BackendIDs[0] != 3 {
		t.Fatalf("last item: %+v, want a service ID of its own and backends [3]", last)
	}
	if none.Err != nil || none.ServiceID != 0 || len(none.BackendIDs) != 0 {
		t.Fatalf("an item asking nothing: %+v", none)
	}
	if got := append(first.BackendIDs, 99); rep.Items[3].BackendIDs[0] != 3 || got[2] != 99 {
		t.Fatal("an append to one item's backend IDs reached another's")
	}
	if a.be.Len() != 3 {
		t.Fatalf("%d backend IDs in use, want 3", a.be.Len())
	}
}

// An AllocAcquire that hands back an earlier answer (Reuse) is answered
// in that answer's arrays where they have the room, every item written
// afresh (an error or IDs the earlier one held do not stay), and the
// request no longer holds it: the same request sent again is answered in
// new arrays, not in the ones the first answer went out in.
func TestAllocatorAnswersInTheArraysOfAnAnswerHandedBack(t *testing.T) {
	a := &allocatorActor{svc: newServiceIDs(0), be: idalloc.NewSpace[lb.BackendID](64)}
	fe := func(i int) lb.L3n4Addr {
		return lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(i)}), Port: 80, Protocol: lb.TCP}
	}
	bes := make([]lb.Backend, 4)
	ask := func(reqID uint64, from, n int, reuse *messages.AllocAcquired) *messages.AllocAcquire {
		m := &messages.AllocAcquire{ReqID: reqID, Reuse: reuse}
		for i := range n {
			m.Items = append(m.Items, messages.AcquireItem{Service: true, Frontend: fe(from + i), Backends: bes})
		}
		return m
	}
	if _, err := a.svc.AcquireID(fe(9), 3); err != nil {
		t.Fatal(err)
	}
	first := a.acquire(ask(1, 0, 3, nil))
	if first.Items[0].Err != nil || first.Items[1].Err != nil || first.Items[2].Err != nil || len(first.IDs) != 12 {
		t.Fatalf("first answer: %+v", first)
	}
	items, ids := &first.Items[0], &first.IDs[:1][0]
	seen := map[lb.BackendID]bool{}
	for _, id := range first.IDs {
		seen[id] = true
	}
	// Two items into an answer of three: the second wants an ID in use.
	m := ask(2, 3, 2, first)
	m.Items[1].WantID = 3
	second := a.acquire(m)
	if second != first || &second.Items[0] != items || &second.IDs[:1][0] != ids {
		t.Fatal("the answer handed back was not answered in")
	}
	if m.Reuse != nil {
		t.Fatal("the request still holds the answer it handed back")
	}
	if second.ReqID != 2 || len(second.Items) != 2 {
		t.Fatalf("answer %d with %d items, want 2 with 2", second.ReqID, len(second.Items))
	}
	ok, refused := second.Items[0], second.Items[1]
	if ok.Err != nil || ok.ServiceID == 0 || len(ok.BackendIDs) != 4 {
		t.Fatalf("first item: %+v", ok)
	}
	for _, id := range ok.BackendIDs {
		if seen[id] {
			t.Fatalf("backend ID %d given twice", id)
		}
	}
	if !errors.Is(refused.Err, engine.ErrServiceIDInUse) || refused.ServiceID != 0 || refused.BackendIDs != nil {
		t.Fatalf("refused item: %+v, want ErrServiceIDInUse and nothing of the earlier answer", refused)
	}
	// Sent again (its first copy's answer taken): new arrays.
	m.ReqID = 3
	m.Items = m.Items[:1]
	m.Items[0].Frontend = fe(20)
	again := a.acquire(m)
	if again == second || &again.Items[0] == items {
		t.Fatal("a request sent again answered in the arrays its first answer went out in")
	}
	// An answer too small for the request: new arrays, answered whole.
	big := a.acquire(ask(4, 30, 5, again))
	if len(big.Items) != 5 || cap(big.IDs) < 20 {
		t.Fatalf("answer of %d items, %d IDs' room", len(big.Items), cap(big.IDs))
	}
	for i, it := range big.Items {
		if it.Err != nil || it.ServiceID == 0 || len(it.BackendIDs) != 4 {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
}
