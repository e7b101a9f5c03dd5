package engine

import (
	"net/netip"
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// requireEveryFieldSet fails if a field of v (a struct, followed into
// nested structs) is its zero value: a service built with every field set
// shows that the stored form keeps each one, and a field added to
// lb.Service or lb.Backend later fails here until the stored form keeps
// it too.
func requireEveryFieldSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	for i := range v.NumField() {
		f, name := v.Field(i), path+"."+v.Type().Field(i).Name
		if f.Kind() == reflect.Struct && f.Type() != reflect.TypeOf(netip.Addr{}) {
			requireEveryFieldSet(t, f, name)
			continue
		}
		require.False(t, f.IsZero(), "%s is not set in the test's service", name)
	}
}

func everyFieldService() *table.Service {
	return &table.Service{
		Spec: lb.Service{
			Frontend: lb.Frontend{ID: 300, L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr("2001:2::10"), Port: 443, Protocol: lb.TCP, Scope: lb.ScopeInternal}},
			Backends: []lb.Backend{
				{L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr("2001:2::1"), Port: 8443, Protocol: lb.TCP, Scope: lb.ScopeInternal}, Weight: 7, State: lb.BackendStateTerminating, NodeLocal: true},
				{L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr("2001:2::2"), Port: 8443, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight},
			},
			Type:                   lb.SVCTypeLoadBalancer,
			ExtTrafficPolicyLocal:  true,
			IntTrafficPolicyLocal:  true,
			SessionAffinity:        true,
			SessionAffinityTimeout: 1 << 23,
			LBAlgorithm:            lb.LBAlgMaglev,
			DSR:                    true,
			SourceRanges:           []netip.Prefix{netip.MustParsePrefix("2001:2:1::/48")},
			SourceRangesDeny:       true,
			Source:                 lb.SourceKubernetes,
		},
		BackendIDs: []lb.BackendID{70000, 5},
	}
}

func TestStoredServiceKeepsEveryField(t *testing.T) {
	in := everyFieldService()
	requireEveryFieldSet(t, reflect.ValueOf(in.Spec), "Service")
	requireEveryFieldSet(t, reflect.ValueOf(in.Spec.Backends[0]), "Backend")

	v4 := &table.Service{
		Spec: lb.Service{
			Frontend: lb.Frontend{ID: 2, L3n4Addr: lb.L3n4Addr{Addr: netip.IPv4Unspecified(), Port: 30080, Protocol: lb.UDP}},
			Backends: []lb.Backend{{L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr("198.18.0.1"), Port: 53, Protocol: lb.UDP}, Weight: lb.DefaultBackendWeight}},
			Type:     lb.SVCTypeNodePort,
		},
		BackendIDs: []lb.BackendID{1},
	}
	tb := svcTable{packer: addrkey.NewBackendPacker()}
	for _, svc := range []*table.Service{in, v4} {
		tb.put(svc)
		got := tb.get(svc.ID())
		require.Equal(t, svc, got)
		require.Equal(t, &svc.Spec, tb.spec(svc.ID()))
		require.Equal(t, svc.Frontend(), tb.stored(svc.ID()).frontend())
		require.Equal(t, svc.Spec.TwoScopes(), tb.stored(svc.ID()).twoScopes())
		for i, b := range svc.Spec.Backends {
			require.Equal(t, addrkey.BackendOf(table.BackendKey(b)), tb.stored(svc.ID()).backend(tb.packer, i).key)
		}
	}
	require.Equal(t, netip.IPv4Unspecified(), tb.get(2).Frontend().Addr, "IPv4 stays IPv4 (not its mapped IPv6 form)")
}

// fullPacker returns a packer that has learnt as many IPv6 prefixes as
// it can (none of them 2001:2::/104).
func fullPacker(t *testing.T) *addrkey.BackendPacker {
	t.Helper()
	p := addrkey.NewBackendPacker()
	for i := range addrkey.MaxBackendPrefixes {
		a := [16]byte{0x20, 0x01, 0x0d, 0xb8, 10: byte(i >> 8), 11: byte(i), 15: 1}
		_, ok := p.Learn(addrkey.BackendFrom16(a, 80, lb.TCP))
		require.True(t, ok)
	}
	_, ok := p.Pack(addrkey.BackendOf(lb.L3n4Addr{Addr: netip.MustParseAddr("2001:2::1"), Port: 80, Protocol: lb.TCP}))
	require.False(t, ok, "the packer is full")
	return p
}

// A service's backends are packed in 16 bytes each while their keys pack
// (IPv4 always, IPv6 of a learnt prefix), and kept wide in 28 otherwise:
// either way the service comes back as it was put.
func TestStoredBackendsArePackedOrWide(t *testing.T) {
	v4 := everyFieldService()
	v4.Spec.Frontend.Addr = netip.MustParseAddr("198.18.0.10")
	v4.Spec.Backends[0].Addr = netip.MustParseAddr("198.18.1.1")
	v4.Spec.Backends[1].Addr = netip.MustParseAddr("198.18.1.2")
	v4.Spec.SourceRanges = []netip.Prefix{netip.MustParsePrefix("198.18.2.0/24")}
	v4.Spec.Frontend.ID = 301
	for _, c := range []struct {
		name   string
		packer *addrkey.BackendPacker
		svc    *table.Service
		wide   bool
	}{
		{"IPv6, prefix learnt", addrkey.NewBackendPacker(), everyFieldService(), false},
		{"IPv6, packer full", fullPacker(t), everyFieldService(), true},
		{"IPv4, packer full", fullPacker(t), v4, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := svcTable{packer: c.packer}
			tb.put(c.svc)
			s := tb.stored(c.svc.ID())
			require.Equal(t, c.wide, s.flags&svcWide != 0)
			per := packedWords
			if c.wide {
				per = wideWords
			}
			require.Len(t, s.words, per*len(c.svc.Spec.Backends))
			require.Equal(t, len(c.svc.Spec.Backends), s.nbe())
			require.Equal(t, c.svc, tb.get(c.svc.ID()))
			require.Equal(t, &c.svc.Spec, tb.spec(c.svc.ID()))
		})
	}
}

func TestStoredServiceIsACopy(t *testing.T) {
	tb := svcTable{packer: addrkey.NewBackendPacker()}
	in := everyFieldService()
	tb.put(in)
	in.Spec.Backends[0].State = lb.BackendStateActive
	in.Spec.SourceRanges[0] = netip.MustParsePrefix("2001:2:2::/48")
	in.BackendIDs[1] = 9
	require.Equal(t, everyFieldService(), tb.get(300), "changing what was put leaves the table as it was")

	got := tb.get(300)
	got.Spec.Backends[1].Weight = 1
	got.Spec.SourceRanges[0] = netip.MustParsePrefix("2001:2:3::/48")
	got.BackendIDs[0] = 1
	require.Equal(t, everyFieldService(), tb.get(300), "changing what get returned leaves the table as it was")
}

func TestSvcTableMatchesAMap(t *testing.T) {
	r := testutil.Rand(t)
	tb := svcTable{packer: addrkey.NewBackendPacker()}
	want := map[lb.ServiceID]*table.Service{}
	for step := range 4000 {
		// IDs in a few runs of pages, and some anywhere.
		id := lb.ServiceID(1 + r.IntN(700))
		if r.IntN(10) == 0 {
			id = lb.ServiceID(1 + r.IntN(65535))
		}
		switch r.IntN(3) {
		case 0:
			tb.delete(id)
			delete(want, id)
		default:
			svc := everyFieldService()
			svc.Spec.Frontend.ID = id
			svc.Spec.Frontend.Port = uint16(step)
			if r.IntN(2) == 0 {
				svc.Spec.SourceRanges = nil
			}
			svc.Spec.Backends = svc.Spec.Backends[:r.IntN(3)]
			svc.BackendIDs = svc.BackendIDs[:len(svc.Spec.Backends)]
			if len(svc.BackendIDs) == 0 {
				svc.Spec.Backends, svc.BackendIDs = nil, nil // what get gives back for none
			}
			tb.put(svc)
			want[id] = svc
		}
		require.Equal(t, len(want), tb.len())
		require.Equal(t, want[id], tb.get(id), "service %d at step %d", id, step)
	}
	seen := map[lb.ServiceID]bool{}
	for id, s := range tb.all {
		require.False(t, seen[id], "service %d yielded twice", id)
		seen[id] = true
		require.Equal(t, want[id], tb.expand(s))
	}
	require.Len(t, seen, len(want))
	requireDensePlaces(t, &tb)
	for id := range want {
		tb.delete(id)
	}
	require.Zero(t, tb.len())
	require.Empty(t, tb.ranges)
	require.Len(t, tb.free, int(tb.used), "every place is free")
}

// requireDensePlaces checks that every place handed out is either a
// service's (once) or free (once): the table uses no more places than
// the most services it held.
func requireDensePlaces(t *testing.T, tb *svcTable) {
	t.Helper()
	owner := map[uint32]lb.ServiceID{}
	for id, p := range tb.place.all {
		require.Less(t, p, tb.used)
		_, dup := owner[p]
		require.False(t, dup, "place %d of two services", p)
		owner[p] = id
		require.Equal(t, id, tb.at(p).id)
	}
	for _, p := range tb.free {
		_, dup := owner[p]
		require.False(t, dup, "place %d free and in use", p)
		owner[p] = 0
		require.Zero(t, tb.at(p).id)
	}
	require.Len(t, owner, int(tb.used))
}

func TestSvcTablePlacesStayDenseWhateverTheIDs(t *testing.T) {
	tb := svcTable{packer: addrkey.NewBackendPacker()}
	// IDs spread over the whole space, as a wrapped allocator cursor
	// leaves them: the places stay 0..n-1.
	for i := range 1000 {
		svc := everyFieldService()
		svc.Spec.Frontend.ID = lb.ServiceID(1 + i*65)
		tb.put(svc)
	}
	require.EqualValues(t, 1000, tb.used)
	require.Len(t, tb.chunks, 4)
	for i := range 500 {
		tb.delete(lb.ServiceID(1 + i*130))
	}
	for i := range 500 {
		svc := everyFieldService()
		svc.Spec.Frontend.ID = lb.ServiceID(2 + i*130)
		tb.put(svc)
	}
	require.EqualValues(t, 1000, tb.used, "freed places are used again")
	require.Empty(t, tb.free)
	requireDensePlaces(t, &tb)
}

func TestStoredFormIsCompact(t *testing.T) {
	require.EqualValues(t, 56, unsafe.Sizeof(storedService{}))
	require.EqualValues(t, 14336, unsafe.Sizeof(svcChunk{}), "a chunk is a size class of the Go heap")
}

// The place index is a map from service ID to place: random sets and
// deletes over the whole ID space (pages made and dropped) keep it equal
// to a map, and a page goes with its last ID.
// A table of a few services created and deleted in turn empties its page
// again and again: the page dropped is the next one made, not a new 4 KB.
func TestPlaceIndexMakesNoPageForAnIDSetAgainAfterItsPageEmptied(t *testing.T) {
	var x placeIndex
	x.set(7, 1)
	x.del(7)
	allocs := testing.AllocsPerRun(100, func() {
		x.set(7, 3)
		x.set(1030, 4) // another page: the spare, then a new one
		x.del(7)
		x.del(1030)
	})
	require.LessOrEqual(t, allocs, 1.0, "one page made for two in use at once, none for the page emptied and used again")
	require.Zero(t, x.n)
	_, ok := x.get(7)
	require.False(t, ok)
}

func TestPlaceIndexEqualsAMapOfPlaces(t *testing.T) {
	r := testutil.Rand(t)
	var x placeIndex
	model := map[lb.ServiceID]uint32{}
	// IDs from a few pages (collisions, pages emptied) and from anywhere.
	id := func() lb.ServiceID {
		if r.IntN(2) == 0 {
			return lb.ServiceID(1 + r.IntN(3<<placePageBits))
		}
		return lb.ServiceID(1 + r.IntN(lb.MaxServiceID))
	}
	for step := range 20000 {
		k := id()
		if r.IntN(3) == 0 {
			x.del(k)
			delete(model, k)
		} else {
			p := uint32(r.IntN(1 << 20))
			x.set(k, p)
			model[k] = p
		}
		if step%1000 == 0 || step == 19999 {
			require.Equal(t, len(model), x.n, "step %d", step)
			got := map[lb.ServiceID]uint32{}
			last := lb.ServiceID(0)
			for k, p := range x.all {
				require.Greater(t, k, last, "in ID order")
				last = k
				got[k] = p
			}
			require.Equal(t, model, got, "step %d", step)
			for i, pg := range x.pages {
				n := 0
				for k := range model {
					if int(k>>placePageBits) == i {
						n++
					}
				}
				require.Equal(t, n > 0, pg != nil, "page %d made while it has IDs, dropped after", i)
				require.EqualValues(t, n, x.used[i])
			}
		}
		p, ok := x.get(k)
		want, wok := model[k]
		require.Equal(t, wok, ok)
		require.Equal(t, want, p)
	}
	for k := range model {
		x.del(k)
	}
	require.Zero(t, x.n)
	for i, pg := range x.pages {
		require.Nil(t, pg, "page %d dropped with its last ID", i)
	}
}
