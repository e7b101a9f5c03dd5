package verify

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// shuffled returns d with every slice in reverse order: Format must not
// depend on the order a dump lists its entries in.
func shuffled(d table.Dump) table.Dump {
	d.Services4, d.Services6 = slices.Clone(d.Services4), slices.Clone(d.Services6)
	d.Backends4, d.Backends6 = slices.Clone(d.Backends4), slices.Clone(d.Backends6)
	d.RevNAT4, d.RevNAT6 = slices.Clone(d.RevNAT4), slices.Clone(d.RevNAT6)
	slices.Reverse(d.Services4)
	slices.Reverse(d.Services6)
	slices.Reverse(d.Backends4)
	slices.Reverse(d.Backends6)
	slices.Reverse(d.RevNAT4)
	slices.Reverse(d.RevNAT6)
	return d
}

func TestFormatListsServicesThenBackendsThenRevNATByID(t *testing.T) {
	web := svc(t, "10.96.0.1:80", 10, "10.0.1.1:8080=2", "10.0.1.2:8080=10/quarantined")
	web.Spec.SessionAffinity, web.Spec.SessionAffinityTimeout = true, 600
	dns := svc(t, "[fd00::a]:53/udp", 2, "[fd00::1]:53/udp=3")
	d := dumpOf(web, dns)
	d.RevNAT4 = append(d.RevNAT4, maps.RevNATEntry{ID: 7, Value: maps.RevNATValue{Address: netip.MustParseAddr("10.96.9.9"), Port: 53}})
	want := []string{
		"SVC: 10.96.0.1:80/TCP#0 count=1 qcount=1 revnat=10 affinity=600 flags=0x50",
		"SVC: 10.96.0.1:80/TCP#1 backend=2 revnat=10",
		"SVC: 10.96.0.1:80/TCP#2 backend=10 revnat=10",
		"SVC: [fd00::a]:53/UDP#0 count=1 revnat=2 flags=0x40",
		"SVC: [fd00::a]:53/UDP#1 backend=3 revnat=2",
		"BE: 2 10.0.1.1:8080/TCP active",
		"BE: 3 [fd00::1]:53/UDP active",
		"BE: 10 10.0.1.2:8080/TCP quarantined",
		"REV: 2 [fd00::a]:53",
		"REV: 7 10.96.9.9:53",
		"REV: 10 10.96.0.1:80",
	}
	require.Equal(t, want, Format(d, false))
	require.Equal(t, want, Format(shuffled(d), false))
}

// Sanitized, the same services give the same lines whatever IDs the
// allocator handed out: service IDs are named by frontend, backend IDs by
// address.
func TestFormatSanitizedDoesNotDependOnAllocatedIDs(t *testing.T) {
	first := dumpOf(
		svc(t, "10.96.0.1:80", 1, "10.0.1.1:8080=1", "10.0.1.2:8080=2"),
		svc(t, "10.96.0.2:80", 2, "10.0.1.2:8080=2", "10.0.1.3:8080=3/terminating"),
	)
	second := dumpOf(
		svc(t, "10.96.0.2:80", 300, "10.0.1.3:8080=4/terminating", "10.0.1.2:8080=17"),
		svc(t, "10.96.0.1:80", 12, "10.0.1.2:8080=17", "10.0.1.1:8080=9"),
	)
	want := []string{
		"SVC: 10.96.0.1:80/TCP#0 count=2 revnat=svc1 flags=0x40",
		"SVC: 10.96.0.1:80/TCP#1 backend=be1 revnat=svc1",
		"SVC: 10.96.0.1:80/TCP#2 backend=be2 revnat=svc1",
		"SVC: 10.96.0.2:80/TCP#0 count=1 qcount=1 revnat=svc2 flags=0x40",
		"SVC: 10.96.0.2:80/TCP#1 backend=be2 revnat=svc2",
		"SVC: 10.96.0.2:80/TCP#2 backend=be3 revnat=svc2",
		"BE: be1 10.0.1.1:8080/TCP active",
		"BE: be2 10.0.1.2:8080/TCP active",
		"BE: be3 10.0.1.3:8080/TCP terminating",
		"REV: svc1 10.96.0.1:80",
		"REV: svc2 10.96.0.2:80",
	}
	require.Equal(t, want, Format(first, true))
	require.Equal(t, want, Format(second, true))
	require.Equal(t, want, Format(shuffled(second), true))
	require.NotEqual(t, Format(first, false), Format(second, false), "unsanitized, the IDs show")
}

// Corrupt maps stay visibly corrupt when sanitized: an ID used twice gets
// one name, ID 0 stays 0, and IDs no entry defines are still named.
func TestFormatSanitizedKeepsCorruptionVisible(t *testing.T) {
	d := dumpOf(
		svc(t, "10.96.0.1:80", 8, "10.0.1.1:8080=1"),
		svc(t, "10.96.0.2:80", 8, "10.0.1.1:8080=2"), // same ID, same address under two IDs
	)
	k := key(t, "10.96.0.3:80", 0)
	d.Services4 = append(d.Services4,
		maps.ServiceEntry{Key: k, Value: maps.ServiceValue{Count: 2}},
		maps.ServiceEntry{Key: maps.ServiceKey{Address: k.Address, Port: 80, Proto: 6, Slot: 1}, Value: maps.ServiceValue{BackendID: 0, RevNATIndex: 0}},
		maps.ServiceEntry{Key: maps.ServiceKey{Address: k.Address, Port: 80, Proto: 6, Slot: 2}, Value: maps.ServiceValue{BackendID: 99, RevNATIndex: 40}},
	)
	require.Equal(t, []string{
		"SVC: 10.96.0.1:80/TCP#0 count=1 revnat=svc1 flags=0x40",
		"SVC: 10.96.0.1:80/TCP#1 backend=be1 revnat=svc1",
		"SVC: 10.96.0.2:80/TCP#0 count=1 revnat=svc1 flags=0x40",
		"SVC: 10.96.0.2:80/TCP#1 backend=be2 revnat=svc1",
		"SVC: 10.96.0.3:80/TCP#0 count=2 revnat=0",
		"SVC: 10.96.0.3:80/TCP#1 backend=0 revnat=0",
		"SVC: 10.96.0.3:80/TCP#2 backend=be3 revnat=svc2",
		"BE: be1 10.0.1.1:8080/TCP active",
		"BE: be2 10.0.1.1:8080/TCP active",
		"REV: svc1 10.96.0.1:80",
		"REV: svc1 10.96.0.2:80",
	}, Format(d, true))
}

// Every field of every entry shows: a dump that differs from another in
// one field formats differently, sanitized or not.
func TestFormatShowsEveryField(t *testing.T) {
	web := svc(t, "10.96.0.1:80", 5, "10.0.1.1:8080=3", "10.0.1.2:8080=4")
	base := dumpOf(web)
	require.Len(t, base.Services4, 3)
	require.Len(t, base.Backends4, 2)
	master := slices.IndexFunc(base.Services4, func(e maps.ServiceEntry) bool { return e.Key.Slot == 0 })
	slot := slices.IndexFunc(base.Services4, func(e maps.ServiceEntry) bool { return e.Key.Slot == 1 })
	edits := map[string]func(d *table.Dump){
		"master count":    func(d *table.Dump) { d.Services4[master].Value.Count++ },
		"master qcount":   func(d *table.Dump) { d.Services4[master].Value.QCount++ },
		"master revnat":   func(d *table.Dump) { d.Services4[master].Value.RevNATIndex = 6 },
		"affinity":        func(d *table.Dump) { d.Services4[master].Value.BackendID = 30 },
		"algorithm":       func(d *table.Dump) { d.Services4[master].Value.BackendID = 2 << 24 },
		"master flags":    func(d *table.Dump) { d.Services4[master].Value.Flags ^= 1 },
		"master flags2":   func(d *table.Dump) { d.Services4[master].Value.Flags2 = 1 },
		"key scope":       func(d *table.Dump) { d.Services4[master].Key.Scope = 1 },
		"key proto":       func(d *table.Dump) { d.Services4[master].Key.Proto = 17 },
		"key port":        func(d *table.Dump) { d.Services4[slot].Key.Port = 81 },
		"key address":     func(d *table.Dump) { d.Services4[slot].Key.Address = netip.MustParseAddr("10.96.0.2") },
		"key slot":        func(d *table.Dump) { d.Services4[slot].Key.Slot = 7 },
		"slot backend":    func(d *table.Dump) { d.Services4[slot].Value.BackendID = 4 },
		"slot revnat":     func(d *table.Dump) { d.Services4[slot].Value.RevNATIndex = 6 },
		"slot count":      func(d *table.Dump) { d.Services4[slot].Value.Count = 1 },
		"slot qcount":     func(d *table.Dump) { d.Services4[slot].Value.QCount = 1 },
		"slot flags":      func(d *table.Dump) { d.Services4[slot].Value.Flags = 1 },
		"slot flags2":     func(d *table.Dump) { d.Services4[slot].Value.Flags2 = 1 },
		"backend address": func(d *table.Dump) { d.Backends4[0].Value.Address = netip.MustParseAddr("10.0.1.9") },
		"backend port":    func(d *table.Dump) { d.Backends4[0].Value.Port = 1 },
		"backend proto":   func(d *table.Dump) { d.Backends4[0].Value.Proto = 17 },
		"backend state":   func(d *table.Dump) { d.Backends4[0].Value.State = uint8(lb.BackendStateMaintenance) },
		"backend cluster": func(d *table.Dump) { d.Backends4[0].Value.ClusterID = 2 },
		"backend zone":    func(d *table.Dump) { d.Backends4[0].Value.Zone = 2 },
		"backend ID":      func(d *table.Dump) { d.Backends4[0].ID = 9 },
		"revnat ID":       func(d *table.Dump) { d.RevNAT4[0].ID = 9 },
		"revnat address":  func(d *table.Dump) { d.RevNAT4[0].Value.Address = netip.MustParseAddr("10.96.0.2") },
		"revnat port":     func(d *table.Dump) { d.RevNAT4[0].Value.Port = 81 },
		"backend dropped": func(d *table.Dump) { d.Backends4 = d.Backends4[1:] },
		"backend twice": func(d *table.Dump) {
			d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 11, Value: d.Backends4[0].Value})
		},
	}
	for name, edit := range edits {
		d := base
		d.Services4, d.Backends4, d.RevNAT4 = slices.Clone(base.Services4), slices.Clone(base.Backends4), slices.Clone(base.RevNAT4)
		edit(&d)
		require.NotEqual(t, Format(base, false), Format(d, false), "%s, IDs shown", name)
		require.NotEqual(t, Format(base, true), Format(d, true), "%s, IDs sanitized", name)
	}
}
