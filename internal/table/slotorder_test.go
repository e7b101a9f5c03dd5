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

// SlotOrder sorts as a stable sort by compareSlot does, the backend IDs
// moving with their backends, whether the keyed sort takes the list (up
// to keyedMax backends without a zone) or not (a zone among them, or more
// backends): lists with repeats (stable order shows), every state, IPv4,
// IPv6 differing in either half, IPv4-mapped IPv6, IPv6 whose bits
// read less than an IPv4 address's, zones, every other
// field of the address differing.
func TestSlotOrderIsAStableSortByCompareSlotWithTheIDsAlong(t *testing.T) {
	r := testutil.Rand(t)
	keyed := 0
	addr := func(zoned bool) netip.Addr {
		switch r.IntN(7) {
		case 0:
			return netip.AddrFrom16([16]byte{0xfd, 7: byte(r.IntN(2)), 15: byte(r.IntN(3))})
		case 1:
			return netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: byte(r.IntN(2)) << 7, 15: byte(r.IntN(3))})
		case 3: // below every IPv4 address by its bits alone
			return netip.AddrFrom16([16]byte{15: byte(r.IntN(3))})
		case 2:
			if zoned {
				return netip.AddrFrom16([16]byte{0xfe, 0x80, 15: byte(r.IntN(3))}).WithZone([]string{"eth0", "eth1"}[r.IntN(2)])
			}
		}
		return netip.AddrFrom4([4]byte{byte(r.IntN(3)) << 7, 0, byte(r.IntN(2)), byte(r.IntN(4))})
	}
	for range 50000 {
		bs := make([]lb.Backend, r.IntN(keyedMax+4))
		zoned := r.IntN(8) == 0
		for i := range bs {
			bs[i] = lb.Backend{
				L3n4Addr: lb.L3n4Addr{
					Addr: addr(zoned), Port: uint16(r.IntN(2)) << (8 * r.IntN(2)), Protocol: []lb.L4Type{lb.TCP, lb.UDP, lb.SCTP}[r.IntN(3)],
					Scope: lb.Scope(r.IntN(2)),
				},
				State:  lb.BackendState(r.IntN(6)),
				Weight: uint16(i), // tells repeats apart
			}
		}
		ids := make([]lb.BackendID, len(bs))
		for i := range ids {
			ids[i] = lb.BackendID(100 + i)
		}
		type pair struct {
			b  lb.Backend
			id lb.BackendID
		}
		want := make([]pair, len(bs))
		for i := range bs {
			want[i] = pair{bs[i], ids[i]}
		}
		slices.SortStableFunc(want, func(a, b pair) int { return compareSlot(a.b, b.b) })
		if !slotOrdered(bs) && len(bs) <= keyedMax && !slices.ContainsFunc(bs, func(b lb.Backend) bool { return b.Addr.Zone() != "" }) {
			keyed++
		}
		withIDs := r.IntN(4) != 0
		if withIDs {
			SlotOrder(bs, ids)
		} else {
			SlotOrder(bs, nil)
		}
		for i := range want {
			if bs[i] != want[i].b || withIDs && ids[i] != want[i].id {
				t.Fatalf("slot %d: got %v (ID %d), want %v (ID %d)", i, bs[i], ids[i], want[i].b, want[i].id)
			}
		}
	}
	if keyed < 10000 {
		t.Fatalf("the keyed sort took %d lists: too few to tell", keyed)
	}
}
