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

// Kind classifies a violation. Its string form is stable: the CLI prints it
// and tests match on it.
type Kind string

const (
	// MissingSlot (invariant 1): a master with count n and qcount q lacks
	// one or more of its slots 1..n+q.
	MissingSlot Kind = "missing-slot"
	// StraySlot (invariant 1): a slot with no master, or with an index
	// above its master's count+qcount. The datapath never reads it; it is a
	// leak that restore deletes.
	StraySlot Kind = "stray-slot"
	// DanglingSlot (invariant 2): a slot within its master's range points
	// to backend ID 0 or to an ID missing from its family's backend map.
	DanglingSlot Kind = "dangling-slot"
	// MissingRevNAT (invariant 3): a service has no revNAT entry under its
	// ID in its family's revNAT map.
	MissingRevNAT Kind = "missing-revnat"
	// WrongRevNAT (invariant 3): a service's revNAT entry holds another
	// address or port than its frontend.
	WrongRevNAT Kind = "wrong-revnat"
	// InvalidServiceID (invariant 4): a master with rev_nat_index 0, which
	// is no service ID.
	InvalidServiceID Kind = "invalid-service-id"
	// DuplicateServiceID (invariant 4): two frontends, in either family
	// (one ID space), share a service ID.
	DuplicateServiceID Kind = "duplicate-service-id"
	// DuplicateBackend (invariant 4): one backend address (IP, port,
	// protocol) is in its family's backend map under two or more IDs.
	DuplicateBackend Kind = "duplicate-backend"
	// DuplicateBackendID (invariant 4): one backend ID is in both the IPv4
	// and the IPv6 backend map.
	DuplicateBackendID Kind = "duplicate-backend-id"
	// OrphanBackend (invariant 4): a backend that no slot refers to.
	// Backends in maintenance are exempt: the engine keeps them in the map
	// without a slot, so the maps cannot say whose they are.
	OrphanBackend Kind = "orphan-backend"
	// StaleMember (invariant 6): an lb_members entry of a service ID no
	// master has, of a backend ID missing from both backend maps, or of an
	// unknown kind.
	StaleMember Kind = "stale-member"
	// StaleAffinityMatch (invariant 6): an lb_affinity_match entry of a
	// service without session affinity (or none), or of a backend that is
	// in none of that service's slots.
	StaleAffinityMatch Kind = "stale-affinity-match"
	// MaglevMissing (invariant 7): a maglev service with a backend of
	// weight above 0 has no table in its family's Maglev map.
	MaglevMissing Kind = "maglev-missing"
	// MaglevWrong (invariant 7): a maglev service's table differs from
	// the one its counted backends and their weights give.
	MaglevWrong Kind = "maglev-wrong"
	// MaglevStray (invariant 7): a table of a service ID that is no maglev
	// service of the map's family, or of one without a usable backend.
	MaglevStray Kind = "maglev-stray"
	// SourceRangeMissing (invariant 8): a master carries FlagSourceRange
	// and its family's source-range map holds no range of its service ID
	// (the datapath would drop every client, or let every denied one in).
	SourceRangeMissing Kind = "source-range-missing"
	// SourceRangeStray (invariant 8): a source-range entry of a service ID
	// whose master (in the entry's family) does not carry FlagSourceRange,
	// or a key the engine never writes.
	SourceRangeStray Kind = "source-range-stray"
)

// Invariant returns the number of the docs/architecture.md invariant that a
// violation of kind k breaks (0 for an unknown kind).
func (k Kind) Invariant() int {
	switch k {
	case MissingSlot, StraySlot:
		return 1
	case DanglingSlot:
		return 2
	case MissingRevNAT, WrongRevNAT:
		return 3
	case InvalidServiceID, DuplicateServiceID, DuplicateBackend, DuplicateBackendID, OrphanBackend:
		return 4
	case StaleMember, StaleAffinityMatch:
		return 6
	case MaglevMissing, MaglevWrong, MaglevStray:
		return 7
	case SourceRangeMissing, SourceRangeStray:
		return 8
	}
	return 0
}

// Violation is one broken invariant.
type Violation struct {
	Kind Kind
	// Family is the family of the map holding the offending entry.
	Family maps.Family
	// ServiceID is the service concerned (0 if none).
	ServiceID lb.ServiceID
	// Frontend is the frontend concerned in lb.L3n4Addr String form ("" if
	// none).
	Frontend string
	// BackendID is the backend concerned (0 if none).
	BackendID lb.BackendID
	// Detail says what is wrong, in lower case.
	Detail string
}

// Invariant is Kind.Invariant.
func (v Violation) Invariant() int { return v.Kind.Invariant() }

// String formats the violation on one line:
//
//	invariant 2 (dangling-slot) ipv4 service 3 10.96.0.10:80/TCP: slot 2 points to missing backend 7
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invariant %d (%s) %s", v.Invariant(), v.Kind, v.Family)
	if v.ServiceID != 0 {
		fmt.Fprintf(&b, " service %d", v.ServiceID)
	}
	if v.Frontend != "" {
		b.WriteString(" " + v.Frontend)
	}
	if v.BackendID != 0 && v.ServiceID == 0 && v.Frontend == "" {
		fmt.Fprintf(&b, " backend %d", v.BackendID)
	}
	b.WriteString(": " + v.Detail)
	return b.String()
}

// Check returns every violation of invariants 1-4, 6 and 8 in d, sorted by
// invariant, kind, family, service ID, frontend, backend ID and detail; nil
// when the maps are consistent. Standalone revNAT entries (an ID no service
// has) are allowed. IPv4 addresses are compared unmapped.
func Check(d table.Dump) []Violation {
	c := &checker{}
	type fam struct {
		f    maps.Family
		svcs []maps.ServiceEntry
		bes  []maps.BackendEntry
		revs []maps.RevNATEntry
	}
	fams := []fam{
		{maps.IPv4, d.Services4, d.Backends4, d.RevNAT4},
		{maps.IPv6, d.Services6, d.Backends6, d.RevNAT6},
	}
	backendIDs := [2]map[uint32]bool{}
	ids := map[uint16][]string{} // service ID -> frontends (both families)
	members := map[uint32]bool{} // backends lb_members names (they may have no slot)
	for _, e := range d.Members {
		if e.Key.Kind == maps.MemberKindBackend {
			members[e.Key.BackendID] = true
		}
	}
	svcs := map[uint16]*serviceFacts{}
	for i, fm := range fams {
		backendIDs[i] = c.checkFamily(fm.f, fm.svcs, fm.bes, fm.revs, ids, members, svcs)
	}
	c.checkMembers(d, svcs, backendIDs)
	c.checkSourceRanges(d)
	for id := range backendIDs[1] {
		if backendIDs[0][id] {
			c.add(Violation{Kind: DuplicateBackendID, Family: maps.IPv6, BackendID: lb.BackendID(id),
				Detail: fmt.Sprintf("backend ID %d is in both lb4_backends and lb6_backends", id)})
		}
	}
	for id, fes := range ids {
		if len(fes) < 2 {
			continue
		}
		slices.Sort(fes)
		c.add(Violation{Kind: DuplicateServiceID, Family: familyOfFrontend(fes[0]), ServiceID: lb.ServiceID(id),
			Detail: fmt.Sprintf("service ID %d is used by %d frontends: %s", id, len(fes), strings.Join(fes, ", "))})
	}
	sortViolations(c.out)
	return c.out
}

// sortViolations sorts vs as Check returns them.
func sortViolations(vs []Violation) {
	slices.SortFunc(vs, func(a, b Violation) int {
		return cmp.Or(
			cmp.Compare(a.Invariant(), b.Invariant()),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Family, b.Family),
			cmp.Compare(a.ServiceID, b.ServiceID),
			cmp.Compare(a.Frontend, b.Frontend),
			cmp.Compare(a.BackendID, b.BackendID),
			cmp.Compare(a.Detail, b.Detail),
		)
	})
}

type checker struct {
	out []Violation
}

// serviceFacts is what invariant 5 needs of a service: whether it has
// session affinity and which backends its slots name.
type serviceFacts struct {
	affinity bool
	slotted  map[uint32]bool
}

// checkMembers checks invariant 6: lb_members and lb_affinity_match refer
// to services and backends that exist.
func (c *checker) checkMembers(d table.Dump, svcs map[uint16]*serviceFacts, backendIDs [2]map[uint32]bool) {
	for _, e := range d.Members {
		k := e.Key
		switch {
		case k.Kind > maps.MemberKindService || (k.Kind == maps.MemberKindService && k.BackendID != 0):
			c.add(Violation{Kind: StaleMember, ServiceID: lb.ServiceID(k.RevNATIndex), BackendID: lb.BackendID(k.BackendID),
				Detail: fmt.Sprintf("lb_members entry of unknown kind %d (backend %d)", k.Kind, k.BackendID)})
		case svcs[k.RevNATIndex] == nil:
			c.add(Violation{Kind: StaleMember, ServiceID: lb.ServiceID(k.RevNATIndex), BackendID: lb.BackendID(k.BackendID),
				Detail: fmt.Sprintf("lb_members entry of service ID %d, which no master has", k.RevNATIndex)})
		case k.BackendID != 0 && !backendIDs[0][k.BackendID] && !backendIDs[1][k.BackendID]:
			c.add(Violation{Kind: StaleMember, ServiceID: lb.ServiceID(k.RevNATIndex), BackendID: lb.BackendID(k.BackendID),
				Detail: fmt.Sprintf("lb_members entry of backend %d, which no backend map has", k.BackendID)})
		}
	}
	for _, k := range d.AffinityMatch {
		s := svcs[k.RevNATIndex]
		switch {
		case s == nil || !s.affinity:
			c.add(Violation{Kind: StaleAffinityMatch, ServiceID: lb.ServiceID(k.RevNATIndex), BackendID: lb.BackendID(k.BackendID),
				Detail: fmt.Sprintf("affinity match of service ID %d, which has no session affinity", k.RevNATIndex)})
		case !s.slotted[k.BackendID]:
			c.add(Violation{Kind: StaleAffinityMatch, ServiceID: lb.ServiceID(k.RevNATIndex), BackendID: lb.BackendID(k.BackendID),
				Detail: fmt.Sprintf("affinity match of backend %d, which no slot of service %d names", k.BackendID, k.RevNATIndex)})
		}
	}
}

func (c *checker) add(v Violation) { c.out = append(c.out, v) }

// familyOfFrontend tells the family from a frontend's String form.
func familyOfFrontend(fe string) maps.Family {
	if strings.HasPrefix(fe, "[") {
		return maps.IPv6
	}
	return maps.IPv4
}

type frontendGroup struct {
	key       maps.ServiceKey // slot 0
	fe        string
	hasMaster bool
	master    maps.ServiceValue
	slots     map[uint16]maps.ServiceValue
}

// checkFamily checks one family's maps and records its frontends by
// service ID in ids. It returns the set of the family's backend IDs.
func (c *checker) checkFamily(f maps.Family, svcs []maps.ServiceEntry, bes []maps.BackendEntry, revs []maps.RevNATEntry, ids map[uint16][]string,
	members map[uint32]bool, facts map[uint16]*serviceFacts) map[uint32]bool {
	backends := make(map[uint32]maps.BackendValue, len(bes))
	for _, e := range bes {
		e.Value.Address = e.Value.Address.Unmap()
		backends[e.ID] = e.Value
	}
	revnat := make(map[uint16]maps.RevNATValue, len(revs))
	for _, e := range revs {
		e.Value.Address = e.Value.Address.Unmap()
		revnat[e.ID] = e.Value
	}

	groups := map[maps.ServiceKey]*frontendGroup{}
	for _, e := range svcs {
		k := e.Key
		k.Address = k.Address.Unmap()
		slot := k.Slot
		k.Slot = 0
		g := groups[k]
		if g == nil {
			g = &frontendGroup{key: k, fe: table.FrontendFromKey(k).String(), slots: map[uint16]maps.ServiceValue{}}
			groups[k] = g
		}
		if slot == 0 {
			g.hasMaster, g.master = true, e.Value
		} else {
			g.slots[slot] = e.Value
		}
	}

	used := map[uint32]bool{}
	for _, g := range groups {
		if !g.hasMaster {
			c.add(Violation{Kind: StraySlot, Family: f, Frontend: g.fe,
				Detail: fmt.Sprintf("%s without a master", slotsPhrase(sortedSlots(g.slots, 0)))})
			continue
		}
		m := g.master
		sid := lb.ServiceID(m.RevNATIndex)
		v := func(kind Kind, bid uint32, format string, args ...any) {
			c.add(Violation{Kind: kind, Family: f, ServiceID: sid, Frontend: g.fe, BackendID: lb.BackendID(bid), Detail: fmt.Sprintf(format, args...)})
		}
		// The internal set of a two-scope service is that service's, not
		// a frontend of its own.
		ext := g.key
		ext.Scope = uint8(lb.ScopeExternal)
		e := groups[ext]
		inner := g.key.Scope == uint8(lb.ScopeInternal) && e != nil && e.hasMaster &&
			e.master.Flags2&lb.Flag2TwoScopes != 0 && e.master.RevNATIndex == m.RevNATIndex
		switch {
		case m.RevNATIndex == 0:
			v(InvalidServiceID, 0, "master has rev_nat_index 0")
		case !inner:
			ids[m.RevNATIndex] = append(ids[m.RevNATIndex], g.fe)
		}
		sf := facts[m.RevNATIndex]
		if sf == nil {
			sf = &serviceFacts{slotted: map[uint32]bool{}}
			facts[m.RevNATIndex] = sf
		}
		sf.affinity = sf.affinity || m.Flags&lb.FlagAffinity != 0

		n := int(m.Count) + int(m.QCount)
		var missing []int
		for s := 1; s <= n; s++ {
			sv, ok := g.slots[uint16(s)]
			if !ok || s > 0xFFFF {
				missing = append(missing, s)
				continue
			}
			if _, ok := backends[sv.BackendID]; sv.BackendID == 0 || !ok {
				v(DanglingSlot, sv.BackendID, "slot %d points to missing backend %d", s, sv.BackendID)
				continue
			}
			used[sv.BackendID] = true
			sf.slotted[sv.BackendID] = true
		}
		if len(missing) > 0 {
			v(MissingSlot, 0, "%s of count+qcount %d missing", slotsPhrase(missing), n)
		}
		if extra := sortedSlots(g.slots, n); len(extra) > 0 {
			v(StraySlot, 0, "%s beyond count+qcount %d", slotsPhrase(extra), n)
		}

		if m.RevNATIndex != 0 {
			want := maps.RevNATValue{Address: g.key.Address, Port: g.key.Port}
			switch r, ok := revnat[m.RevNATIndex]; {
			case !ok:
				v(MissingRevNAT, 0, "no entry for service ID %d in lb%d_reverse_nat", m.RevNATIndex, f)
			case r != want:
				v(WrongRevNAT, 0, "revNAT entry %d points to %s, want %s", m.RevNATIndex, addrPort(r), addrPort(want))
			}
		}
	}

	byAddr := map[string][]uint32{}
	for id, b := range backends {
		k := fmt.Sprintf("%s/%s", netip.AddrPortFrom(b.Address, b.Port), lb.L4Type(b.Proto))
		byAddr[k] = append(byAddr[k], id)
		if !used[id] && !members[id] && lb.BackendState(b.State) != lb.BackendStateMaintenance {
			c.add(Violation{Kind: OrphanBackend, Family: f, BackendID: lb.BackendID(id),
				Detail: fmt.Sprintf("backend %d (%s, %s) is referenced by no slot", id, k, lb.BackendState(b.State))})
		}
	}
	for addr, bids := range byAddr {
		if len(bids) < 2 {
			continue
		}
		slices.Sort(bids)
		c.add(Violation{Kind: DuplicateBackend, Family: f, BackendID: lb.BackendID(bids[0]),
			Detail: fmt.Sprintf("backend %s is under IDs %s", addr, joinInts(bids))})
	}

	set := make(map[uint32]bool, len(backends))
	for id := range backends {
		set[id] = true
	}
	return set
}

// sortedSlots returns the slot numbers above n, ascending.
func sortedSlots(slots map[uint16]maps.ServiceValue, n int) []int {
	var out []int
	for s := range slots {
		if int(s) > n {
			out = append(out, int(s))
		}
	}
	slices.Sort(out)
	return out
}

func slotsPhrase(ss []int) string {
	if len(ss) == 1 {
		return "slot " + strconv.Itoa(ss[0])
	}
	return "slots " + joinInts(ss)
}

func joinInts[T int | uint32](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatUint(uint64(x), 10)
	}
	return strings.Join(parts, ", ")
}

func addrPort(v maps.RevNATValue) string {
	return netip.AddrPortFrom(v.Address, v.Port).String()
}
