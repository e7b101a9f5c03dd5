package verify

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// Format renders the entries of d as text lines, one per entry, in a fixed
// order: the service map entries by frontend (address, port, protocol,
// scope) and slot, then the backends, then the revNAT entries, by ID:
//
//	SVC: 10.96.0.1:80/TCP#0 count=2 revnat=1
//	SVC: 10.96.0.1:80/TCP#1 backend=1 revnat=1
//	SVC: 10.96.0.1:80/TCP#2 backend=2 revnat=1
//	BE: 1 10.0.1.1:8080/TCP active
//	BE: 2 10.0.1.2:8080/TCP quarantined
//	REV: 1 10.96.0.1:80
//
// A master (slot 0) always shows count and revnat, a slot backend and
// revnat; every other field (qcount, affinity, alg, flags, flags2 and a
// backend's cluster and zone) shows when it is not zero, so two dumps that
// differ in any field of any entry give different lines.
//
// With sanitizeIDs, service and backend IDs are replaced by ordinal names
// that do not depend on the order the IDs were allocated in, so a test can
// compare against fixed lines: service IDs become svc1, svc2, … in the order
// of their frontends (then of standalone revNAT entries' addresses, then of
// IDs only a slot names), backend IDs become be1, be2, … in the order of the
// backends' addresses (then of IDs only a slot names). ID 0 (no ID) stays 0.
// Two entries under the same ID get the same name, so corruption such as a
// service ID used twice still shows.
func Format(d table.Dump, sanitizeIDs bool) []string {
	svcs := slices.Concat(d.Services4, d.Services6)
	bes := slices.Concat(d.Backends4, d.Backends6)
	revs := slices.Concat(d.RevNAT4, d.RevNAT6)
	slices.SortStableFunc(svcs, func(a, b maps.ServiceEntry) int {
		return cmp.Or(compareFrontend(a.Key, b.Key), cmp.Compare(a.Key.Slot, b.Key.Slot))
	})
	svcName, beName := rawID[uint16], rawID[uint32]
	if sanitizeIDs {
		svcName, beName = serviceNames(svcs, revs), backendNames(svcs, bes)
	}
	// Backends and revNAT entries are listed by their (sanitized) ID.
	slices.SortStableFunc(bes, func(a, b maps.BackendEntry) int {
		return cmp.Or(compareName(beName(a.ID), beName(b.ID)), a.Value.Address.Compare(b.Value.Address))
	})
	slices.SortStableFunc(revs, func(a, b maps.RevNATEntry) int {
		return cmp.Or(compareName(svcName(a.ID), svcName(b.ID)), a.Value.Address.Compare(b.Value.Address))
	})

	out := make([]string, 0, len(svcs)+len(bes)+len(revs))
	for _, e := range svcs {
		var b strings.Builder
		k, v := e.Key, e.Value
		fe := lb.L3n4Addr{Addr: k.Address, Port: k.Port, Protocol: lb.L4Type(k.Proto), Scope: lb.Scope(k.Scope)}
		fmt.Fprintf(&b, "SVC: %s#%d", fe, k.Slot)
		if k.Slot == 0 {
			fmt.Fprintf(&b, " count=%d", v.Count)
			field(&b, "qcount", uint64(v.QCount))
			fmt.Fprintf(&b, " revnat=%s", svcName(v.RevNATIndex))
			field(&b, "affinity", uint64(v.BackendID&lb.MaxSessionAffinityTimeout))
			field(&b, "alg", uint64(v.BackendID>>24))
		} else {
			fmt.Fprintf(&b, " backend=%s revnat=%s", beName(v.BackendID), svcName(v.RevNATIndex))
			field(&b, "count", uint64(v.Count))
			field(&b, "qcount", uint64(v.QCount))
		}
		hexField(&b, "flags", v.Flags)
		hexField(&b, "flags2", v.Flags2)
		out = append(out, b.String())
	}
	for _, e := range bes {
		var b strings.Builder
		v := e.Value
		be := lb.L3n4Addr{Addr: v.Address, Port: v.Port, Protocol: lb.L4Type(v.Proto)}
		fmt.Fprintf(&b, "BE: %s %s %s", beName(e.ID), be, lb.BackendState(v.State))
		field(&b, "cluster", uint64(v.ClusterID))
		field(&b, "zone", uint64(v.Zone))
		out = append(out, b.String())
	}
	for _, e := range revs {
		out = append(out, fmt.Sprintf("REV: %s %s", svcName(e.ID), netip.AddrPortFrom(e.Value.Address, e.Value.Port)))
	}
	return out
}

func field(b *strings.Builder, name string, v uint64) {
	if v != 0 {
		fmt.Fprintf(b, " %s=%d", name, v)
	}
}

func hexField(b *strings.Builder, name string, v uint8) {
	if v != 0 {
		fmt.Fprintf(b, " %s=%#02x", name, v)
	}
}

func rawID[T uint16 | uint32](id T) string { return strconv.FormatUint(uint64(id), 10) }

// compareName orders names as their numbers: 2 before 10, svc2 before svc10.
func compareName(a, b string) int {
	na, nb := strings.TrimLeft(a, "svcbe"), strings.TrimLeft(b, "svcbe")
	return cmp.Or(cmp.Compare(len(a)-len(na), len(b)-len(nb)), cmp.Compare(len(na), len(nb)), strings.Compare(na, nb))
}

func compareFrontend(a, b maps.ServiceKey) int {
	return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Scope, b.Scope))
}

// ordinals names the IDs in order: each ID is placed at the first position
// it appears in (the callers list the IDs in the order that defines them),
// and named prefix1, prefix2, … ID 0 keeps the name 0.
func ordinals[T uint16 | uint32](prefix string, ids []T) func(T) string {
	names := map[T]string{}
	for _, id := range ids {
		if _, ok := names[id]; !ok && id != 0 {
			names[id] = prefix + strconv.Itoa(len(names)+1)
		}
	}
	return func(id T) string {
		if n, ok := names[id]; ok {
			return n
		}
		return rawID(id)
	}
}

// serviceNames names the service IDs by their frontends (svcs is sorted),
// then by the address of standalone revNAT entries, then, for IDs only a
// slot names, by value.
func serviceNames(svcs []maps.ServiceEntry, revs []maps.RevNATEntry) func(uint16) string {
	var ids []uint16
	for _, e := range svcs {
		if e.Key.Slot == 0 {
			ids = append(ids, e.Value.RevNATIndex)
		}
	}
	revs = slices.Clone(revs)
	slices.SortFunc(revs, func(a, b maps.RevNATEntry) int {
		return cmp.Or(a.Value.Address.Compare(b.Value.Address), cmp.Compare(a.Value.Port, b.Value.Port), cmp.Compare(a.ID, b.ID))
	})
	for _, e := range revs {
		ids = append(ids, e.ID)
	}
	var rest []uint16
	for _, e := range svcs {
		rest = append(rest, e.Value.RevNATIndex)
	}
	slices.Sort(rest)
	return ordinals("svc", append(ids, rest...))
}

// backendNames names the backend IDs by the backends' addresses, then,
// for IDs only a slot names, by value.
func backendNames(svcs []maps.ServiceEntry, bes []maps.BackendEntry) func(uint32) string {
	bes = slices.Clone(bes)
	slices.SortFunc(bes, func(a, b maps.BackendEntry) int {
		return cmp.Or(a.Value.Address.Compare(b.Value.Address), cmp.Compare(a.Value.Port, b.Value.Port),
			cmp.Compare(a.Value.Proto, b.Value.Proto), cmp.Compare(a.ID, b.ID))
	})
	ids := make([]uint32, 0, len(bes))
	for _, e := range bes {
		ids = append(ids, e.ID)
	}
	var rest []uint32
	for _, e := range svcs {
		if e.Key.Slot != 0 {
			rest = append(rest, e.Value.BackendID)
		}
	}
	slices.Sort(rest)
	return ordinals("be", append(ids, rest...))
}
