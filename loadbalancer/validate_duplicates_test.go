package loadbalancer

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
)

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
