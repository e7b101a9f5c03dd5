package table

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// slotOrdered says a list is in slot order exactly when sorting by
// compareSlot would leave it as it is, for lists in order, nearly in order
// and not, with states of every rank (unknown ones rank with maintenance).
func TestSlotOrderedIsSortedByCompareSlot(t *testing.T) {
	r := testutil.Rand(t)
	ordered := 0
	for range 50000 {
		bs := make([]lb.Backend, r.IntN(8))
		for i := range bs {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(4))})
			if r.IntN(4) == 0 {
				a = netip.AddrFrom16([16]byte{0xfd, 15: byte(r.IntN(4))})
			}
			bs[i] = lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: a, Port: uint16(r.IntN(2)), Protocol: lb.TCP}, State: lb.BackendState(r.IntN(6))}
		}
		if r.IntN(2) == 0 {
			slices.SortStableFunc(bs, compareSlot)
			if len(bs) > 1 && r.IntN(2) == 0 { // one pair out of place
				i := r.IntN(len(bs) - 1)
				bs[i], bs[i+1] = bs[i+1], bs[i]
			}
		}
		want := slices.IsSortedFunc(bs, compareSlot)
		if got := slotOrdered(bs); got != want {
			t.Fatalf("%v: slotOrdered %v, want %v", bs, got, want)
		}
		if want && len(bs) > 1 {
			ordered++
		}
	}
	if ordered == 0 {
		t.Fatal("no list of two or more in order")
	}
}
