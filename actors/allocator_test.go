package actors

import (
	"errors"
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
