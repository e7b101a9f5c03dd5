package table

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	feLB  = "203.0.113.9:443/tcp"
	feLB6 = "[2001:db8::9]:443/tcp"
)

// rangedServices are a v4 allow list, a v6 deny list and a service
// without ranges.
func rangedServices() []*Service {
	return []*Service{
		svc(feLB, 5, func(s *lb.Service) {
			s.Type = lb.SVCTypeLoadBalancer
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("198.51.100.7/32")}
		}, be("10.0.9.1:443/tcp", 91)),
		svc(feLB6, 6, func(s *lb.Service) {
			s.Type = lb.SVCTypeNodePort
			s.SourceRanges, s.SourceRangesDeny = []netip.Prefix{netip.MustParsePrefix("::/0")}, true
		}, be("[fd00::9:1]:443/tcp", 92)),
		svc("10.96.0.50:80/tcp", 7, nil, be("10.0.9.2:80/tcp", 93)),
	}
}

func rk(id uint16, p string) maps.SourceRangeKey {
	return maps.SourceRangeKeyOf(id, netip.MustParsePrefix(p))
}

// SourceRanges gives one key per range of a service with ranges, in its
// family's map; none for a service without.
func TestSourceRangesAreTheServicesPrefixes(t *testing.T) {
	ss := rangedServices()
	assert.Equal(t, []maps.SourceRangeKey{rk(5, "10.0.0.0/8"), rk(5, "10.1.0.0/16"), rk(5, "198.51.100.7/32")}, SourceRanges(ss[0]))
	k := SourceRanges(ss[1])[0]
	assert.Equal(t, maps.SourceRangeKey{PrefixLen: 32, RevNATIndex: 6, Addr: netip.IPv6Unspecified()}, k)
	assert.Equal(t, maps.IPv6, k.Family())
	assert.Nil(t, SourceRanges(ss[2]))
	f, f2 := ss[1].Spec.Flags()
	assert.NotZero(t, f&lb.FlagSourceRange)
	assert.NotZero(t, f2&lb.Flag2SourceRangeDeny)
}

// Restore rebuilds each service's ranges and deny bit from the maps and
// the master's flags: a consistent dump gives the services back, ranges
// in the engine's order, with no repair.
func TestRebuildSourceRangesConsistent(t *testing.T) {
	ss := rangedServices()
	d := dumpOf(ss...)
	shuffle(testutil.Rand(t), d.SourceRanges)
	got := Rebuild(d)
	assert.Empty(t, got.Repairs)
	assert.Empty(t, got.SourceRanges.Writes)
	assert.Empty(t, got.SourceRanges.Deletes)
	require.Len(t, got.Services, 3)
	assert.Equal(t, ss[0].Spec.SourceRanges, got.Services[0].Spec.SourceRanges)
	assert.False(t, got.Services[0].Spec.SourceRangesDeny)
	assert.Equal(t, ss[1].Spec.SourceRanges, got.Services[1].Spec.SourceRanges)
	assert.True(t, got.Services[1].Spec.SourceRangesDeny)
	assert.Nil(t, got.Services[2].Spec.SourceRanges)
}

// Rule 10 and the source-range part of rule 5, table-driven: what a
// corrupted dump repairs, and that applying it in the engine's order
// never leaves a master carrying the flag without ranges.
func TestRebuildSourceRangeRepairs(t *testing.T) {
	r := testutil.Rand(t)
	cases := []struct {
		name    string
		corrupt func(d *Dump)
		deletes []maps.SourceRangeKey
		kinds   map[RepairKind]int
		ids     []lb.ServiceID // services after restore
		ranges  int            // of service 5 after restore
	}{
		{
			name:    "range of a service without the flag",
			corrupt: func(d *Dump) { d.SourceRanges = append(d.SourceRanges, rk(7, "10.0.0.0/8")) },
			deletes: []maps.SourceRangeKey{rk(7, "10.0.0.0/8")},
			kinds:   map[RepairKind]int{RepairSourceRange: 1},
			ids:     []lb.ServiceID{5, 6, 7}, ranges: 3,
		},
		{
			name:    "range of no service",
			corrupt: func(d *Dump) { d.SourceRanges = append(d.SourceRanges, rk(99, "fd00::/8")) },
			deletes: []maps.SourceRangeKey{rk(99, "fd00::/8")},
			kinds:   map[RepairKind]int{RepairSourceRange: 1},
			ids:     []lb.ServiceID{5, 6, 7}, ranges: 3,
		},
		{
			name:    "range in the other family's map",
			corrupt: func(d *Dump) { d.SourceRanges = append(d.SourceRanges, rk(5, "fd00::/8")) },
			deletes: []maps.SourceRangeKey{rk(5, "fd00::/8")},
			kinds:   map[RepairKind]int{RepairSourceRange: 1},
			ids:     []lb.ServiceID{5, 6, 7}, ranges: 3,
		},
		{
			name: "key the engine never writes (pad, short prefix)",
			corrupt: func(d *Dump) {
				k := rk(5, "10.2.0.0/16")
				k.Pad = 1
				d.SourceRanges = append(d.SourceRanges, k, maps.SourceRangeKey{PrefixLen: 8, Addr: netip.IPv4Unspecified()})
			},
			deletes: func() []maps.SourceRangeKey {
				k := rk(5, "10.2.0.0/16")
				k.Pad = 1
				return []maps.SourceRangeKey{{PrefixLen: 8, Addr: netip.IPv4Unspecified()}, k}
			}(),
			kinds: map[RepairKind]int{RepairSourceRange: 2},
			ids:   []lb.ServiceID{5, 6, 7}, ranges: 3,
		},
		{
			name: "some ranges lost: the rest is the service's",
			corrupt: func(d *Dump) {
				d.SourceRanges = slices.DeleteFunc(d.SourceRanges, func(k maps.SourceRangeKey) bool { return k == rk(5, "10.1.0.0/16") })
			},
			ids: []lb.ServiceID{5, 6, 7}, ranges: 2,
		},
		{
			name: "master lost the flag: its ranges go",
			corrupt: func(d *Dump) {
				editSvc(d.Services4, k(feLB, 0), func(v *maps.ServiceValue) { v.Flags &^= lb.FlagSourceRange })
			},
			deletes: []maps.SourceRangeKey{rk(5, "10.0.0.0/8"), rk(5, "10.1.0.0/16"), rk(5, "198.51.100.7/32")},
			kinds:   map[RepairKind]int{RepairSourceRange: 3},
			ids:     []lb.ServiceID{5, 6, 7}, ranges: 0,
		},
		{
			name: "flag without any range: the service is removed, nothing opened",
			corrupt: func(d *Dump) {
				d.SourceRanges = slices.DeleteFunc(d.SourceRanges, func(k maps.SourceRangeKey) bool { return k.RevNATIndex == 5 })
			},
			kinds: map[RepairKind]int{RepairSourceRange: 1, RepairOrphanBackend: 1, RepairInvalidEntry: 1}, // its revNAT entry goes too
			ids:   []lb.ServiceID{6, 7},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := dumpOf(rangedServices()...)
			tc.corrupt(&d)
			got := Rebuild(d)
			assert.Equal(t, tc.deletes, got.SourceRanges.Deletes, "deletes")
			assert.Empty(t, got.SourceRanges.Writes, "writes")
			kinds := map[RepairKind]int{}
			for _, rp := range got.Repairs {
				kinds[rp.Kind]++
			}
			if tc.kinds == nil {
				tc.kinds = map[RepairKind]int{}
			}
			assert.Equal(t, tc.kinds, kinds, "repairs %+v", got.Repairs)
			var ids []lb.ServiceID
			for _, s := range got.Services {
				ids = append(ids, s.ID())
				if s.ID() == 5 {
					assert.Len(t, s.Spec.SourceRanges, tc.ranges)
				}
			}
			assert.Equal(t, tc.ids, ids)
			checkShuffled(t, r, d, got)
			checkRepaired(t, d, got)
		})
	}
}
