package verify

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// svc builds an engine-table service: frontend fe with ID id and the given
// backends ("ADDR=ID" or "ADDR=ID/state").
func svc(t testing.TB, fe string, id lb.ServiceID, backends ...string) *table.Service {
	t.Helper()
	a, err := lb.ParseL3n4Addr(fe)
	require.NoError(t, err)
	s := &table.Service{Spec: lb.Service{Frontend: lb.Frontend{L3n4Addr: a, ID: id}}}
	for _, spec := range backends {
		addr, rest, ok := strings.Cut(spec, "=")
		require.True(t, ok, spec)
		idStr, state, _ := strings.Cut(rest, "/")
		b, err := lb.ParseBackend(addr)
		require.NoError(t, err)
		if state != "" {
			b.State, err = lb.ParseBackendState(state)
			require.NoError(t, err)
		}
		bid, err := lb.ParseBackendID(idStr)
		require.NoError(t, err)
		s.Spec.Backends = append(s.Spec.Backends, b)
		s.BackendIDs = append(s.BackendIDs, bid)
	}
	table.SlotOrder(s.Spec.Backends, s.BackendIDs)
	return s
}

// dumpOf returns the entries the engine writes for svcs (a backend shared
// by several services is written once).
func dumpOf(svcs ...*table.Service) table.Dump {
	var d table.Dump
	seen := map[uint32]bool{}
	for _, s := range svcs {
		es := table.SlotsAndMaster(s)
		d.Members = append(d.Members, table.MemberEntries(s)...)
		d.AffinityMatch = append(d.AffinityMatch, table.AffinityMatches(s)...)
		d.SourceRanges = append(d.SourceRanges, table.SourceRanges(s)...)
		bes := table.BackendEntries(s)
		rev := table.RevNAT(s)
		if s.Family() == maps.IPv6 {
			d.Services6 = append(d.Services6, es...)
			d.RevNAT6 = append(d.RevNAT6, rev)
		} else {
			d.Services4 = append(d.Services4, es...)
			d.RevNAT4 = append(d.RevNAT4, rev)
		}
		for _, b := range bes {
			if seen[b.ID] {
				continue
			}
			seen[b.ID] = true
			if s.Family() == maps.IPv6 {
				d.Backends6 = append(d.Backends6, b)
			} else {
				d.Backends4 = append(d.Backends4, b)
			}
		}
	}
	return d
}

func key(t testing.TB, fe string, slot uint16) maps.ServiceKey {
	t.Helper()
	a, err := lb.ParseL3n4Addr(fe)
	require.NoError(t, err)
	return table.Key(a, slot)
}

func removeService(es []maps.ServiceEntry, k maps.ServiceKey) []maps.ServiceEntry {
	return slices.DeleteFunc(slices.Clone(es), func(e maps.ServiceEntry) bool { return e.Key == k })
}

func editService(es []maps.ServiceEntry, k maps.ServiceKey, f func(*maps.ServiceValue)) []maps.ServiceEntry {
	es = slices.Clone(es)
	for i := range es {
		if es[i].Key == k {
			f(&es[i].Value)
		}
	}
	return es
}

func TestCheck(t *testing.T) {
	web := func(t testing.TB) *table.Service {
		return svc(t, "10.96.0.10:80", 1, "10.0.1.5:8080=1", "10.0.1.6:8080=2")
	}
	dns := func(t testing.TB) *table.Service {
		return svc(t, "10.96.0.53:53/udp", 2, "10.0.1.7:53/udp=3")
	}
	v6 := func(t testing.TB) *table.Service {
		return svc(t, "[fd00::a]:443", 3, "[fd00::1]:8443=4", "[fd00::2]:8443=5/terminating")
	}
	base := func(t testing.TB) table.Dump { return dumpOf(web(t), dns(t), v6(t)) }

	cases := []struct {
		name    string
		corrupt func(t testing.TB, d *table.Dump)
		want    []string // Violation.String() of every violation, in order
	}{
		{name: "consistent", corrupt: func(testing.TB, *table.Dump) {}},
		{name: "empty", corrupt: func(_ testing.TB, d *table.Dump) { *d = table.Dump{} }},
		{
			name: "maintenance backend without slot is not an orphan",
			corrupt: func(t testing.TB, d *table.Dump) {
				*d = dumpOf(web(t), svc(t, "10.96.0.11:80", 9, "10.0.1.9:80=9/maintenance"))
			},
		},
		{
			name: "standalone revNAT entry is allowed",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.RevNAT4 = append(d.RevNAT4, maps.RevNATEntry{ID: 77, Value: maps.RevNATValue{Address: netip.MustParseAddr("10.1.1.1"), Port: 99}})
			},
		},
		{
			name: "missing slot",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services4 = removeService(d.Services4, key(t, "10.96.0.10:80", 2))
			},
			want: []string{
				"invariant 1 (missing-slot) ipv4 service 1 10.96.0.10:80/TCP: slot 2 of count+qcount 2 missing",
				"invariant 4 (orphan-backend) ipv4 backend 2: backend 2 (10.0.1.6:8080/TCP, active) is referenced by no slot",
			},
		},
		{
			name: "missing qcount slot",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services6 = removeService(d.Services6, key(t, "[fd00::a]:443", 2))
			},
			want: []string{
				"invariant 1 (missing-slot) ipv6 service 3 [fd00::a]:443/TCP: slot 2 of count+qcount 2 missing",
				"invariant 4 (orphan-backend) ipv6 backend 5: backend 5 ([fd00::2]:8443/TCP, terminating) is referenced by no slot",
			},
		},
		{
			name: "slots without master",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services4 = removeService(d.Services4, key(t, "10.96.0.10:80", 0))
			},
			want: []string{
				"invariant 1 (stray-slot) ipv4 10.96.0.10:80/TCP: slots 1, 2 without a master",
				"invariant 4 (orphan-backend) ipv4 backend 1: backend 1 (10.0.1.5:8080/TCP, active) is referenced by no slot",
				"invariant 4 (orphan-backend) ipv4 backend 2: backend 2 (10.0.1.6:8080/TCP, active) is referenced by no slot",
			},
		},
		{
			name: "slot beyond count",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services4 = editService(d.Services4, key(t, "10.96.0.10:80", 0), func(v *maps.ServiceValue) { v.Count = 1 })
			},
			want: []string{
				"invariant 1 (stray-slot) ipv4 service 1 10.96.0.10:80/TCP: slot 2 beyond count+qcount 1",
				"invariant 4 (orphan-backend) ipv4 backend 2: backend 2 (10.0.1.6:8080/TCP, active) is referenced by no slot",
			},
		},
		{
			name: "dangling slot",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.Backends4 = slices.DeleteFunc(d.Backends4, func(e maps.BackendEntry) bool { return e.ID == 3 })
			},
			want: []string{"invariant 2 (dangling-slot) ipv4 service 2 10.96.0.53:53/UDP: slot 1 points to missing backend 3"},
		},
		{
			name: "slot to backend ID 0",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services4 = editService(d.Services4, key(t, "10.96.0.53:53/udp", 1), func(v *maps.ServiceValue) { v.BackendID = 0 })
			},
			want: []string{
				"invariant 2 (dangling-slot) ipv4 service 2 10.96.0.53:53/UDP: slot 1 points to missing backend 0",
				"invariant 4 (orphan-backend) ipv4 backend 3: backend 3 (10.0.1.7:53/UDP, active) is referenced by no slot",
			},
		},
		{
			name: "slot to a backend of the other family",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services4 = editService(d.Services4, key(t, "10.96.0.53:53/udp", 1), func(v *maps.ServiceValue) { v.BackendID = 4 })
			},
			want: []string{
				"invariant 2 (dangling-slot) ipv4 service 2 10.96.0.53:53/UDP: slot 1 points to missing backend 4",
				"invariant 4 (orphan-backend) ipv4 backend 3: backend 3 (10.0.1.7:53/UDP, active) is referenced by no slot",
			},
		},
		{
			name:    "missing revNAT",
			corrupt: func(_ testing.TB, d *table.Dump) { d.RevNAT6 = nil },
			want:    []string{"invariant 3 (missing-revnat) ipv6 service 3 [fd00::a]:443/TCP: no entry for service ID 3 in lb6_reverse_nat"},
		},
		{
			name: "revNAT in the other family's map",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.RevNAT6 = append(d.RevNAT6, d.RevNAT4[0])
				d.RevNAT4 = d.RevNAT4[1:]
			},
			want: []string{"invariant 3 (missing-revnat) ipv4 service 1 10.96.0.10:80/TCP: no entry for service ID 1 in lb4_reverse_nat"},
		},
		{
			name: "wrong revNAT",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.RevNAT4 = slices.Clone(d.RevNAT4)
				d.RevNAT4[1].Value.Port = 5353
			},
			want: []string{"invariant 3 (wrong-revnat) ipv4 service 2 10.96.0.53:53/UDP: revNAT entry 2 points to 10.96.0.53:5353, want 10.96.0.53:53"},
		},
		{
			name: "duplicate service ID across families",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services6 = editService(d.Services6, key(t, "[fd00::a]:443", 0), func(v *maps.ServiceValue) { v.RevNATIndex = 1 })
			},
			want: []string{
				"invariant 3 (missing-revnat) ipv6 service 1 [fd00::a]:443/TCP: no entry for service ID 1 in lb6_reverse_nat",
				"invariant 4 (duplicate-service-id) ipv4 service 1: service ID 1 is used by 2 frontends: 10.96.0.10:80/TCP, [fd00::a]:443/TCP",
			},
		},
		{
			name: "master with ID 0",
			corrupt: func(t testing.TB, d *table.Dump) {
				d.Services4 = editService(d.Services4, key(t, "10.96.0.53:53/udp", 0), func(v *maps.ServiceValue) { v.RevNATIndex = 0 })
			},
			want: []string{"invariant 4 (invalid-service-id) ipv4 10.96.0.53:53/UDP: master has rev_nat_index 0"},
		},
		{
			name: "backend address under two IDs",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.Backends4 = append(slices.Clone(d.Backends4), maps.BackendEntry{ID: 40, Value: d.Backends4[0].Value})
			},
			want: []string{
				"invariant 4 (duplicate-backend) ipv4 backend 1: backend 10.0.1.5:8080/TCP is under IDs 1, 40",
				"invariant 4 (orphan-backend) ipv4 backend 40: backend 40 (10.0.1.5:8080/TCP, active) is referenced by no slot",
			},
		},
		{
			name: "backend ID in both families",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.Backends6 = append(slices.Clone(d.Backends6), maps.BackendEntry{ID: 1, Value: d.Backends6[0].Value})
			},
			want: []string{
				"invariant 4 (duplicate-backend) ipv6 backend 1: backend [fd00::1]:8443/TCP is under IDs 1, 4",
				"invariant 4 (duplicate-backend-id) ipv6 backend 1: backend ID 1 is in both lb4_backends and lb6_backends",
				"invariant 4 (orphan-backend) ipv6 backend 1: backend 1 ([fd00::1]:8443/TCP, active) is referenced by no slot",
			},
		},
		{
			name: "orphan backend",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 99, Value: maps.BackendValue{Address: netip.MustParseAddr("10.0.9.9"), Port: 80, Proto: 6}})
			},
			want: []string{"invariant 4 (orphan-backend) ipv4 backend 99: backend 99 (10.0.9.9:80/TCP, active) is referenced by no slot"},
		},
		{
			name: "ipv4-mapped addresses compare unmapped",
			corrupt: func(_ testing.TB, d *table.Dump) {
				d.RevNAT4 = slices.Clone(d.RevNAT4)
				d.RevNAT4[0].Value.Address = netip.AddrFrom16(d.RevNAT4[0].Value.Address.As16())
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := base(t)
			tc.corrupt(t, &d)
			var got []string
			for _, v := range Check(d) {
				require.Equal(t, v.Kind.Invariant(), v.Invariant())
				require.NotZero(t, v.Invariant(), "kind %s has no invariant", v.Kind)
				got = append(got, v.String())
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCheckIsDeterministic(t *testing.T) {
	r := testutil.Rand(t)
	d := dumpOf(svc(t, "10.96.0.10:80", 1, "10.0.1.5:8080=1"), svc(t, "10.96.0.11:80", 1, "10.0.1.6:8080=2"))
	d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 8, Value: d.Backends4[0].Value}, maps.BackendEntry{ID: 9, Value: d.Backends4[1].Value})
	d.RevNAT4 = nil
	want := Check(d)
	require.NotEmpty(t, want)
	for range 50 {
		r.Shuffle(len(d.Services4), func(i, j int) { d.Services4[i], d.Services4[j] = d.Services4[j], d.Services4[i] })
		r.Shuffle(len(d.Backends4), func(i, j int) { d.Backends4[i], d.Backends4[j] = d.Backends4[j], d.Backends4[i] })
		require.Equal(t, want, Check(d))
	}
}

// mapState is a family's maps as key -> value, to apply restore's fixes.
type mapState struct {
	svcs map[maps.ServiceKey]maps.ServiceValue
	bes  map[uint32]maps.BackendValue
	revs map[uint16]maps.RevNATValue
}

func stateOf(svcs []maps.ServiceEntry, bes []maps.BackendEntry, revs []maps.RevNATEntry) *mapState {
	s := &mapState{svcs: map[maps.ServiceKey]maps.ServiceValue{}, bes: map[uint32]maps.BackendValue{}, revs: map[uint16]maps.RevNATValue{}}
	for _, e := range svcs {
		s.svcs[e.Key] = e.Value
	}
	for _, e := range bes {
		s.bes[e.ID] = e.Value
	}
	for _, e := range revs {
		s.revs[e.ID] = e.Value
	}
	return s
}

func (s *mapState) apply(f *table.Fixes) {
	for _, e := range f.RevNATWrites {
		s.revs[e.ID] = e.Value
	}
	for _, k := range f.MasterDeletes {
		delete(s.svcs, k)
	}
	for _, e := range f.SlotWrites {
		s.svcs[e.Key] = e.Value
	}
	for _, e := range f.MasterWrites {
		s.svcs[e.Key] = e.Value
	}
	for _, k := range f.SlotDeletes {
		delete(s.svcs, k)
	}
	for _, id := range f.BackendDeletes {
		delete(s.bes, id)
	}
	for _, id := range f.RevNATDeletes {
		delete(s.revs, id)
	}
}

func (s *mapState) entries() ([]maps.ServiceEntry, []maps.BackendEntry, []maps.RevNATEntry) {
	var svcs []maps.ServiceEntry
	var bes []maps.BackendEntry
	var revs []maps.RevNATEntry
	for k, v := range s.svcs {
		svcs = append(svcs, maps.ServiceEntry{Key: k, Value: v})
	}
	for k, v := range s.bes {
		bes = append(bes, maps.BackendEntry{ID: k, Value: v})
	}
	for k, v := range s.revs {
		revs = append(revs, maps.RevNATEntry{ID: k, Value: v})
	}
	return svcs, bes, revs
}

// corrupt applies one random change that the maps could hold.
func corrupt(r *rand.Rand, d *table.Dump) string {
	switch r.IntN(8) {
	case 0:
		if len(d.Services4) > 0 {
			i := r.IntN(len(d.Services4))
			d.Services4 = slices.Delete(d.Services4, i, i+1)
		}
		return "delete a service entry"
	case 1:
		if len(d.Backends4) > 0 {
			i := r.IntN(len(d.Backends4))
			d.Backends4 = slices.Delete(d.Backends4, i, i+1)
		}
		return "delete a backend"
	case 2:
		if len(d.RevNAT4) > 0 {
			i := r.IntN(len(d.RevNAT4))
			d.RevNAT4[i].Value.Port++
		}
		return "rewrite a revNAT entry"
	case 3:
		if len(d.Services4) > 0 {
			i := r.IntN(len(d.Services4))
			d.Services4[i].Value.BackendID = uint32(r.IntN(12))
		}
		return "point a slot elsewhere"
	case 4:
		if len(d.Services4) > 0 {
			i := r.IntN(len(d.Services4))
			d.Services4[i].Value.RevNATIndex = uint16(r.IntN(6))
		}
		return "change a rev_nat_index"
	case 5:
		d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: uint32(1 + r.IntN(12)), Value: maps.BackendValue{
			Address: netip.AddrFrom4([4]byte{10, 0, 1, byte(1 + r.IntN(4))}), Port: 8080, Proto: 6, State: uint8(r.IntN(4)),
		}})
		return "add a backend"
	case 6:
		if len(d.Services4) > 0 {
			i := r.IntN(len(d.Services4))
			d.Services4[i].Value.Count = uint16(r.IntN(4))
		}
		return "change a count"
	default:
		if len(d.RevNAT4) > 0 {
			i := r.IntN(len(d.RevNAT4))
			d.RevNAT4 = slices.Delete(d.RevNAT4, i, i+1)
		}
		return "delete a revNAT entry"
	}
}

// dedupe keeps one entry per key, as a map would.
func dedupe(d table.Dump) table.Dump {
	s4 := stateOf(d.Services4, d.Backends4, d.RevNAT4)
	s6 := stateOf(d.Services6, d.Backends6, d.RevNAT6)
	var out table.Dump
	out.Services4, out.Backends4, out.RevNAT4 = s4.entries()
	out.Services6, out.Backends6, out.RevNAT6 = s6.entries()
	return out
}

// TestCheckAgreesWithRestore corrupts consistent maps at random: whenever
// Check finds a violation, restore must find something to repair, and the
// maps restore leaves behind must pass Check.
func TestCheckAgreesWithRestore(t *testing.T) {
	r := testutil.Rand(t)
	for iter := range 500 {
		var svcs []*table.Service
		for i := range 1 + r.IntN(4) {
			var bes []string
			for j := range 1 + r.IntN(3) {
				n := 1 + (i+j)%4
				bes = append(bes, fmt.Sprintf("10.0.1.%d:8080=%d", n, n))
			}
			svcs = append(svcs, svc(t, fmt.Sprintf("10.96.0.%d:80", i+1), lb.ServiceID(i+1), bes...))
		}
		d := dumpOf(svcs...)
		var applied []string
		for range r.IntN(4) {
			applied = append(applied, corrupt(r, &d))
		}
		d = dedupe(d)
		vs := Check(d)
		rest := table.Rebuild(d)
		if len(vs) > 0 && len(rest.Repairs) == 0 {
			t.Fatalf("iteration %d (%v): Check found %v but restore repairs nothing", iter, applied, vs)
		}
		s4 := stateOf(d.Services4, d.Backends4, d.RevNAT4)
		s4.apply(&rest.Fixes4)
		var after table.Dump
		after.Services4, after.Backends4, after.RevNAT4 = s4.entries()
		if vs := Check(after); len(vs) > 0 {
			t.Fatalf("iteration %d (%v): after restore's fixes Check still finds %v", iter, applied, vs)
		}
	}
}

// Invariant 6, and the internal set of a two-scope service, which shares
// its service's ID without being a frontend of its own.
func TestCheckMembersAffinityMatchesAndTwoScopes(t *testing.T) {
	two := svc(t, "203.0.113.5:443/tcp", 5, "10.0.4.1:443/tcp=41", "10.0.4.2:443/tcp=42")
	two.Spec.Type, two.Spec.ExtTrafficPolicyLocal = lb.SVCTypeLoadBalancer, true
	two.Spec.Backends[0].NodeLocal = true
	aff := svc(t, "10.96.0.7:80/tcp", 7, "10.0.7.1:80/tcp=71", "10.0.7.2:80/tcp=72/maintenance")
	aff.Spec.SessionAffinity = true
	aff.Spec.Backends[0].Weight = 3
	d := dumpOf(two, aff)
	require.True(t, two.Spec.TwoScopes())
	require.NotEmpty(t, d.Members)
	require.NotEmpty(t, d.AffinityMatch)
	require.Empty(t, Check(d), "what the engine writes is consistent")

	bad := d
	bad.Members = append(slices.Clone(d.Members), maps.MemberEntry{Key: maps.MemberKey{BackendID: 71, RevNATIndex: 99}, Value: maps.MemberValue{Weight: 1}},
		maps.MemberEntry{Key: maps.MemberKey{BackendID: 999, RevNATIndex: 7}, Value: maps.MemberValue{Weight: 1}})
	bad.AffinityMatch = append(slices.Clone(d.AffinityMatch), maps.AffinityMatchKey{BackendID: 41, RevNATIndex: 5},
		maps.AffinityMatchKey{BackendID: 72, RevNATIndex: 7})
	var kinds []string
	for _, v := range Check(bad) {
		require.Equal(t, 6, v.Invariant(), v.String())
		kinds = append(kinds, fmt.Sprintf("%s %d/%d", v.Kind, v.ServiceID, v.BackendID))
	}
	require.ElementsMatch(t, []string{"stale-member 99/71", "stale-member 7/999", "stale-affinity-match 5/41", "stale-affinity-match 7/72"}, kinds)
}

// Invariant 8: a master carrying the source-range flag has ranges in its
// family's map; every range belongs to such a master.
func TestCheckSourceRanges(t *testing.T) {
	v4 := svc(t, "203.0.113.5:443/tcp", 5, "10.0.4.1:443/tcp=41")
	v4.Spec.Type = lb.SVCTypeLoadBalancer
	v4.Spec.SourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24")}
	v6 := svc(t, "[2001:db8::5]:443/tcp", 6, "[fd00::4:1]:443/tcp=61")
	v6.Spec.Type = lb.SVCTypeLoadBalancer
	v6.Spec.SourceRanges, v6.Spec.SourceRangesDeny = []netip.Prefix{netip.MustParsePrefix("2001:db8:bad::/48")}, true
	plain := svc(t, "10.96.0.7:80/tcp", 7, "10.0.7.1:80/tcp=71")
	d := dumpOf(v4, v6, plain)
	require.Len(t, d.SourceRanges, 3)
	require.Empty(t, Check(d), "what the engine writes is consistent")

	bad := d
	bad.SourceRanges = append(slices.DeleteFunc(slices.Clone(d.SourceRanges), func(k maps.SourceRangeKey) bool { return k.RevNATIndex == 6 }),
		maps.SourceRangeKeyOf(7, netip.MustParsePrefix("10.0.0.0/8")),    // a service without the flag
		maps.SourceRangeKeyOf(5, netip.MustParsePrefix("fd00::/8")),      // the other family's map
		maps.SourceRangeKeyOf(99, netip.MustParsePrefix("10.9.0.0/16")),  // no service
		maps.SourceRangeKey{PrefixLen: 8, Addr: netip.IPv4Unspecified()}) // never written
	var kinds []string
	for _, v := range Check(bad) {
		require.Equal(t, 8, v.Invariant(), v.String())
		kinds = append(kinds, fmt.Sprintf("%s %s %d", v.Kind, v.Family, v.ServiceID))
	}
	require.ElementsMatch(t, []string{"source-range-missing ipv6 6", "source-range-stray ipv4 7", "source-range-stray ipv6 5",
		"source-range-stray ipv4 99", "source-range-stray ipv4 0"}, kinds)
}
