package loadbalancer

import (
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
)

// randomAddr returns an address of a small pool, so that backends equal
// their frontend and each other often: IPv4, IPv6, IPv4-mapped, zoned,
// unspecified, or none.
func randomAddr(r *rand.Rand) netip.Addr {
	switch r.IntN(10) {
	case 0:
		return netip.Addr{}
	case 1:
		return netip.IPv4Unspecified()
	case 2:
		return netip.IPv6Unspecified()
	case 3:
		return netip.AddrFrom16(netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(4))}).As16())
	case 4:
		return netip.AddrFrom16([16]byte{0xfe, 0x80, 15: byte(r.IntN(4))}).WithZone("eth0")
	case 5, 6:
		return netip.AddrFrom16([16]byte{0xfd, 15: byte(r.IntN(4))})
	}
	return netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(4))})
}

func randomProto(r *rand.Rand) L4Type {
	return []L4Type{ANY, TCP, UDP, SCTP, 250}[r.IntN(5)]
}

// The check without field names (fits) says a backend is fine exactly
// when the one with them (validateIn) finds nothing wrong, whatever the
// backend and frontend.
func TestBackendFitsIsValidateInWithoutNames(t *testing.T) {
	r := testutil.Rand(t)
	bad := 0
	for range 200000 {
		fe := L3n4Addr{Addr: randomAddr(r), Port: uint16(r.IntN(3)), Protocol: randomProto(r)}
		b := Backend{L3n4Addr: L3n4Addr{Addr: randomAddr(r), Port: uint16(r.IntN(3)), Protocol: randomProto(r), Scope: Scope(r.IntN(3))}, State: BackendState(r.IntN(6))}
		err := b.validateIn("", fe)
		if got := b.fits(&fe); got != (err == nil) {
			t.Fatalf("backend %+v, frontend %+v: fits %v, validateIn %v", b, fe, got, err)
		}
		if err != nil {
			bad++
		}
	}
	if bad == 0 || bad == 200000 {
		t.Fatalf("%d of 200000 backends refused: the cases do not cover both answers", bad)
	}
}

// Validate finds the first backend that repeats an earlier one (its
// address, port and protocol) wherever the lists are sorted, partly
// sorted or not, short or long (a map past 16 backends), as comparing
// each with every earlier one does.
func TestValidateFindsTheFirstDuplicateBackend(t *testing.T) {
	r := testutil.Rand(t)
	found := 0
	for range 20000 {
		s := &Service{Frontend: Frontend{L3n4Addr: L3n4Addr{Addr: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: TCP}}}
		n := 1 + r.IntN(40)
		next := 0
		for range n {
			if r.IntN(8) == 0 { // out of order, or again
				next = r.IntN(next + 1)
			}
			s.Backends = append(s.Backends, Backend{L3n4Addr: L3n4Addr{
				Addr: netip.AddrFrom4([4]byte{10, 0, byte(next >> 8), byte(next)}), Port: 8080, Protocol: TCP, Scope: Scope(r.IntN(2)),
			}, State: BackendState(r.IntN(3))})
			next += 1 + r.IntN(2)
		}
		want := ""
	search:
		for i := range s.Backends {
			for j := range i {
				a, b := s.Backends[i], s.Backends[j]
				if a.Addr == b.Addr && a.Port == b.Port && a.Protocol == b.Protocol {
					want = `invalid backends[` + strconv.Itoa(i) + `] "` + a.String() + `": duplicate of backends[` + strconv.Itoa(j) + `]`
					break search
				}
			}
		}
		got := ""
		if err := s.Validate(); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Fatalf("backends %v: Validate %q, want %q", s.Backends, got, want)
		}
		if want != "" {
			found++
		}
	}
	if found == 0 {
		t.Fatal("no list had a duplicate")
	}
}
