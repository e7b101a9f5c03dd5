package table

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// Dump is what was read back from the six maps.
type Dump struct {
	Services4, Services6 []maps.ServiceEntry
	Backends4, Backends6 []maps.BackendEntry
	RevNAT4, RevNAT6     []maps.RevNATEntry
}

// Fixes are the map writes that make one family's maps consistent with the
// rebuilt table. The engine applies them in field order: RevNATWrites,
// MasterDeletes, SlotWrites, MasterWrites, SlotDeletes, BackendDeletes,
// RevNATDeletes (make before break: the datapath, reading master -> slot ->
// backend concurrently, never finds a master whose count exceeds the slots
// present, or a slot pointing to a deleted backend, unless the dump itself
// had one). Every list is sorted (service keys by frontend, then slot; IDs
// ascending) and holds each key at most once.
type Fixes struct {
	// RevNATWrites are revNAT entries missing or pointing elsewhere.
	RevNATWrites []maps.RevNATEntry
	// MasterDeletes are the masters of services removed entirely.
	MasterDeletes []maps.ServiceKey
	// SlotWrites are slots 1..n whose value must change or that are missing.
	SlotWrites []maps.ServiceEntry
	// MasterWrites are masters whose value must change.
	MasterWrites []maps.ServiceEntry
	// SlotDeletes are slots beyond the new count, slots without master and
	// all slots of removed services.
	SlotDeletes []maps.ServiceKey
	// BackendDeletes are invalid, duplicate or orphan backend IDs of this
	// family.
	BackendDeletes []uint32
	// RevNATDeletes are revNAT entries to remove: entries of a kept service
	// that live in the other family's map, entries of removed frontends and
	// invalid ones (ID 0).
	RevNATDeletes []uint16
}

// Empty reports whether there is nothing to write or delete.
func (f *Fixes) Empty() bool { return f.Writes() == 0 }

// Writes returns the total number of entries written or deleted.
func (f *Fixes) Writes() int {
	return len(f.RevNATWrites) + len(f.MasterDeletes) + len(f.SlotWrites) + len(f.MasterWrites) +
		len(f.SlotDeletes) + len(f.BackendDeletes) + len(f.RevNATDeletes)
}

// RepairKind classifies an inconsistency found in the dumped maps. Its
// string form is stable: logs and metric labels use it.
type RepairKind string

const (
	// RepairSlotsWithoutMaster: slots of a frontend that has no master
	// entry; they are deleted.
	RepairSlotsWithoutMaster RepairKind = "slots-without-master"
	// RepairMissingSlot: the master's count+qcount exceeds the slots
	// present; the missing slots are dropped and the rest compacted.
	RepairMissingSlot RepairKind = "missing-slot"
	// RepairExtraSlot: a slot with an index above the master's
	// count+qcount; it is deleted.
	RepairExtraSlot RepairKind = "extra-slot"
	// RepairDanglingSlot: a slot pointing to a backend ID that is missing
	// from its family's backend map (or is 0), or to a backend in
	// maintenance (which gets no slot); the slot is dropped.
	RepairDanglingSlot RepairKind = "dangling-slot"
	// RepairDuplicateServiceID: two frontends (in any family: one ID space)
	// with one service ID; all but one are removed.
	RepairDuplicateServiceID RepairKind = "duplicate-service-id"
	// RepairMissingRevNAT: a service without a revNAT entry; it is written.
	RepairMissingRevNAT RepairKind = "missing-revnat"
	// RepairWrongRevNAT: the revNAT entry of a service's ID points to
	// another address or port (it is rewritten), or lives in the other
	// family's map (it is deleted there).
	RepairWrongRevNAT RepairKind = "wrong-revnat"
	// RepairDuplicateBackend: one backend address (address, port, protocol)
	// under two or more IDs; the lowest ID is kept, slots are rewritten to
	// it and the other IDs deleted.
	RepairDuplicateBackend RepairKind = "duplicate-backend"
	// RepairOrphanBackend: a backend no slot refers to; it is deleted.
	RepairOrphanBackend RepairKind = "orphan-backend"
	// RepairOrphanRevNAT: a revNAT entry whose ID no service has; it is
	// deleted.
	RepairOrphanRevNAT RepairKind = "orphan-revnat"
	// RepairInvalidEntry: an entry the engine never writes: a master with
	// rev_nat_index 0 or an unknown protocol or scope (service removed), a
	// master with flags or affinity/algorithm bits the engine would not set
	// (rewritten), a backend with ID 0 or an unknown protocol or state, or
	// with a backend ID present in both families (deleted), a slot with
	// another rev_nat_index than its master or stray bits (rewritten) or
	// repeating a backend of an earlier slot (dropped), an address of the
	// wrong family, a revNAT entry with ID 0 or of a removed frontend.
	RepairInvalidEntry RepairKind = "invalid-entry"
	// RepairSlotOrder: slots not in state order (active, terminating,
	// quarantined), or a count/qcount that does not match the slot states;
	// slots are reordered and the master rewritten.
	RepairSlotOrder RepairKind = "slot-order"
)

// String returns the kind as used in logs and metrics.
func (k RepairKind) String() string { return string(k) }

// Repair is one inconsistency found in the dumped maps and what was done
// about it.
type Repair struct {
	Kind      RepairKind
	Family    maps.Family  // the family of the map holding the entry
	ServiceID lb.ServiceID // 0 if none
	Frontend  string       // "" if none (lb.L3n4Addr String form)
	BackendID lb.BackendID // 0 if none
	Detail    string       // human sentence, lowercase
}

// Restored is the table rebuilt from a Dump, with the writes that make the
// maps equal to it and the repairs that explain them.
type Restored struct {
	// Services sorted by ID; Spec from SpecFromMaster, Backends and
	// BackendIDs in slot order.
	Services []*Service
	// OrphanRevNAT are revNAT entries of IDs no service has: leftovers of
	// a create or delete cut short by a crash, or standalone entries added
	// with RevNATAdd before the restart. They are deleted (RevNATDeletes,
	// RepairOrphanRevNAT) so that no ID leaks. Both families, v4 map first,
	// by ID.
	OrphanRevNAT []maps.RevNATEntry
	// Fixes4 and Fixes6 are the writes of each family.
	Fixes4, Fixes6 Fixes
	// Repairs sorted by kind, family, service ID, frontend, backend ID and
	// detail.
	Repairs []Repair
}

// Fixes returns the fixes of family f.
func (r *Restored) Fixes(f maps.Family) *Fixes {
	if f == maps.IPv6 {
		return &r.Fixes6
	}
	return &r.Fixes4
}

// Rebuild rebuilds the engine's table from the dumped maps, which are the
// only source of truth, and computes the writes that repair them. It is
// deterministic: the same entries in any order give the same result. A dump
// of what the engine itself writes (Master, Slots, BackendEntry, RevNAT)
// gives no fixes and no repairs.
//
// Decisions beyond the rules of the design:
//   - Duplicate keys within one input list (impossible in a real map dump)
//     are reduced to one entry, the lowest value in a fixed order.
//   - A frontend or backend address of the other family than its map is an
//     invalid entry: the frontend's entries or the backend are deleted.
//   - A backend ID in both families is deleted from the v6 map only if the
//     v4 entry is valid; an invalid v4 entry is deleted and the v6 one kept.
//   - A slot pointing to a backend in maintenance is dropped as a dangling
//     slot; the backend is then deleted as an orphan unless another slot
//     refers to it (maintenance backends have no slot, so the maps cannot
//     say which service they belong to).
//   - A master with an unknown LB algorithm, with the affinity flag and a
//     zero timeout, or with flag bits the engine does not set is kept and
//     rewritten (invalid entry), not removed: the Spec is normalized so that
//     SpecFromMaster(Master(svc)) == svc.Spec.
//   - Of several frontends with one ID whose revNAT entries all match, the
//     lowest matching one is kept.
//   - A revNAT entry with ID 0 is invalid and deleted.
func Rebuild(d Dump) *Restored {
	rb := &rebuild{out: &Restored{}}
	for i, f := range families {
		rb.fam[i] = &famState{fam: f, fixes: rb.out.Fixes(f)}
	}
	// The service entries load on another goroutine while the revNAT and
	// backend entries load here: they share nothing but the repair list,
	// which each fills on its own and which is joined in the serial order.
	svcs := &rebuild{out: &Restored{}, fam: rb.fam}
	done := make(chan struct{})
	go func() {
		defer close(done)
		svcs.loadServices(d)
	}()
	rb.loadRevNAT(d)
	rb.loadBackends(d)
	<-done
	rb.out.Repairs = append(rb.out.Repairs, svcs.out.Repairs...)
	rb.dedupeServiceIDs()
	for _, fs := range rb.fam {
		rb.rebuildServices(fs)
	}
	rb.deleteOrphanBackends()
	rb.reconcileRevNAT()
	rb.finish()
	return rb.out
}

var families = [2]maps.Family{maps.IPv4, maps.IPv6}

type groupState int

const (
	groupKept    groupState = iota
	groupRemoved            // removed by rule 2 (invalid) or 3 (duplicate ID)
	groupGone               // slots without master
)

// group is every service map entry of one frontend.
type group struct {
	key       maps.ServiceKey // slot 0
	fe        lb.L3n4Addr
	hasMaster bool
	master    maps.ServiceValue
	slotNs    []uint16            // ascending
	slotVs    []maps.ServiceValue // slotVs[i] is the value of slot slotNs[i]
	nslots    int                 // slot entries (loadServices' count)
	state     groupState
	svc       *Service
}

func (g *group) id() uint16 { return g.master.RevNATIndex }

// sortSlots orders the slots by number and keeps the least value of a
// repeated one (most groups have a few dozen slots: an insertion sort).
func (g *group) sortSlots() {
	ns, vs := g.slotNs, g.slotVs
	if len(ns) > 32 { // a large service: sort pairs
		type pair struct {
			n uint16
			v maps.ServiceValue
		}
		ps := make([]pair, len(ns))
		for i := range ns {
			ps[i] = pair{ns[i], vs[i]}
		}
		slices.SortFunc(ps, func(a, b pair) int {
			return cmp.Or(cmp.Compare(a.n, b.n), compareServiceValue(a.v, b.v))
		})
		for i, p := range ps {
			ns[i], vs[i] = p.n, p.v
		}
	}
	less := func(i, j int) bool {
		return ns[i] < ns[j] || ns[i] == ns[j] && compareServiceValue(vs[i], vs[j]) < 0
	}
	for i := 1; i < len(ns); i++ { // sorted already if large
		for j := i; j > 0 && less(j, j-1); j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
			vs[j], vs[j-1] = vs[j-1], vs[j]
		}
	}
	w := 0
	for r := range ns {
		if w > 0 && ns[r] == ns[w-1] {
			continue
		}
		ns[w], vs[w] = ns[r], vs[r]
		w++
	}
	g.slotNs, g.slotVs = ns[:w], vs[:w]
}

// slot returns the value of slot n, if the map has it.
func (g *group) slot(n uint16) (maps.ServiceValue, bool) {
	if i, ok := slices.BinarySearch(g.slotNs, n); ok {
		return g.slotVs[i], true
	}
	return maps.ServiceValue{}, false
}

type famState struct {
	fam      maps.Family
	fixes    *Fixes
	backends backendSet        // valid backends, after rule 4
	alias    map[uint32]uint32 // duplicate backend ID -> kept ID
	revnat   map[uint16]maps.RevNATValue
	revIDs   []uint16 // ascending
	ids      []uint32 // IDs of the valid backends, ascending (before duplicates are removed)
	groups   []*group // by key
}

type rebuild struct {
	out *Restored
	fam [2]*famState
	// list is rebuildService's scratch, kept from one service to the next
	// (each goroutine of Rebuild has its own rebuild).
	list []slotted
}

func (rb *rebuild) other(fs *famState) *famState {
	if fs == rb.fam[0] {
		return rb.fam[1]
	}
	return rb.fam[0]
}

func (rb *rebuild) repair(kind RepairKind, fam maps.Family, sid uint16, fe string, bid uint32, format string, args ...any) {
	rb.out.Repairs = append(rb.out.Repairs, Repair{
		Kind: kind, Family: fam, ServiceID: lb.ServiceID(sid), Frontend: fe, BackendID: lb.BackendID(bid),
		Detail: fmt.Sprintf(format, args...),
	})
}

func (rb *rebuild) svcRepair(kind RepairKind, fs *famState, g *group, bid uint32, format string, args ...any) {
	rb.repair(kind, fs.fam, g.id(), g.fe.String(), bid, format, args...)
}

// Loading: normalize (IPv4 addresses unmapped), sort, and keep one entry
// per key.

func (rb *rebuild) loadRevNAT(d Dump) {
	in := [2][]maps.RevNATEntry{d.RevNAT4, d.RevNAT6}
	for i, fs := range rb.fam {
		es := slices.Clone(in[i])
		if fs.fam == maps.IPv4 {
			for j := range es {
				es[j].Value.Address = es[j].Value.Address.Unmap()
			}
		}
		slices.SortFunc(es, func(a, b maps.RevNATEntry) int {
			if c := cmp.Compare(a.ID, b.ID); c != 0 {
				return c // the value is compared only for a repeated ID (cmp.Or would compare it every time)
			}
			return compareRevNAT(a.Value, b.Value)
		})
		es = slices.CompactFunc(es, func(a, b maps.RevNATEntry) bool { return a.ID == b.ID })
		fs.revnat = make(map[uint16]maps.RevNATValue, len(es))
		for _, e := range es {
			fs.revnat[e.ID] = e.Value
			fs.revIDs = append(fs.revIDs, e.ID)
		}
	}
}

// loadBackends applies rule 4: invalid backends, IDs in both families and
// duplicate backend addresses.
func (rb *rebuild) loadBackends(d Dump) {
	in := [2][]maps.BackendEntry{d.Backends4, d.Backends6}
	var ids [2][]uint32 // valid backend IDs of each family, sorted
	for i, fs := range rb.fam {
		// One value per ID (the least, if a dump repeats an ID), by ID.
		fs.backends = newBackendSet(in[i], fs.fam == maps.IPv4)
		fs.alias = make(map[uint32]uint32)
		all := fs.backends.sortedIDs()
		ids[i] = all[:0] // filtered in place
		for _, id := range all {
			v, _ := fs.backends.get(id)
			e := maps.BackendEntry{ID: id, Value: v}
			if reason := invalidBackend(fs.fam, e); reason != "" {
				rb.repair(RepairInvalidEntry, fs.fam, 0, "", e.ID, "backend %d %s: deleted", e.ID, reason)
				fs.fixes.BackendDeletes = append(fs.fixes.BackendDeletes, e.ID)
				fs.backends.drop(id)
				continue
			}
			ids[i] = append(ids[i], id)
		}
	}

	v4, v6 := rb.fam[0], rb.fam[1]
	ids[1] = slices.DeleteFunc(ids[1], func(id uint32) bool {
		if _, ok := v4.backends.get(id); !ok {
			return false
		}
		rb.repair(RepairInvalidEntry, v6.fam, 0, "", id, "backend %d is also in the ipv4 backend map: deleted here", id)
		v6.backends.drop(id)
		v6.fixes.BackendDeletes = append(v6.fixes.BackendDeletes, id)
		return true
	})

	for i, fs := range rb.fam {
		fs.ids = ids[i]
		// A backend's identity: address, port, protocol (what BackendKey
		// keeps), in a key without pointers.
		type identity struct {
			addr  [16]byte
			port  uint16
			proto uint8
		}
		byKey := make(map[identity]uint32, len(ids[i]))
		for _, id := range ids[i] { // by ID: the lowest of duplicates is kept
			v, _ := fs.backends.get(id)
			ik := identity{v.Address.As16(), v.Port, v.Proto}
			kept, dup := byKey[ik]
			if !dup {
				byKey[ik] = id
				continue
			}
			k := BackendKey(BackendFromValue(v))
			rb.repair(RepairDuplicateBackend, fs.fam, 0, "", id, "backend %d duplicates backend %d (%s): deleted", id, kept, k)
			fs.alias[id] = kept
			fs.backends.drop(id)
			fs.fixes.BackendDeletes = append(fs.fixes.BackendDeletes, id)
		}
	}
}

func invalidBackend(fam maps.Family, e maps.BackendEntry) string {
	switch {
	case e.ID == 0:
		return "has the invalid ID 0"
	case !e.Value.Address.IsValid() || maps.FamilyOf(e.Value.Address) != fam:
		return "has address " + e.Value.Address.String() + " of the wrong family"
	case !lb.L4Type(e.Value.Proto).IsValid():
		return "has unknown protocol " + strconv.Itoa(int(e.Value.Proto))
	case !lb.BackendState(e.Value.State).IsValid():
		return "has unknown state " + strconv.Itoa(int(e.Value.State))
	}
	return ""
}

// loadServices groups the service entries by frontend and applies rules 1
// and 2.
func (rb *rebuild) loadServices(d Dump) {
	in := [2][]maps.ServiceEntry{d.Services4, d.Services6}
	for i, fs := range rb.fam {
		// Grouped by frontend with a map, then the groups sorted by key and
		// each group's slots by number: cheaper than sorting every entry.
		type feIdx struct {
			addr        [16]byte
			v4          bool
			port        uint16
			proto, scop uint8
		}
		idx := make(map[feIdx]*group, len(in[i])/4+1)
		// Two passes: the first finds each entry's group and counts the
		// slots, the second fills every group's slots, carved from one
		// array (no slice grown slot by slot).
		at := make([]*group, len(in[i]))
		nslots := 0
		for j, e := range in[i] {
			k := e.Key
			if fs.fam == maps.IPv4 {
				k.Address = k.Address.Unmap()
			}
			slot := k.Slot
			k.Slot = 0
			fi := feIdx{k.Address.As16(), k.Address.Is4(), k.Port, k.Proto, k.Scope}
			g := idx[fi]
			if g == nil {
				g = &group{key: k, fe: FrontendFromKey(k)}
				idx[fi] = g
				fs.groups = append(fs.groups, g)
			}
			if slot == 0 {
				// A repeated key (a hand-made dump) keeps its least value.
				if !g.hasMaster || compareServiceValue(e.Value, g.master) < 0 {
					g.hasMaster, g.master = true, e.Value
				}
				continue
			}
			at[j] = g
			g.nslots++
			nslots++
		}
		ns, vs := make([]uint16, nslots), make([]maps.ServiceValue, nslots)
		off := 0
		for _, g := range fs.groups {
			n := off + g.nslots
			g.slotNs, g.slotVs = ns[off:off:n], vs[off:off:n]
			off = n
		}
		for j, g := range at {
			if g != nil {
				g.slotNs = append(g.slotNs, in[i][j].Key.Slot)
				g.slotVs = append(g.slotVs, in[i][j].Value)
			}
		}
		slices.SortFunc(fs.groups, func(a, b *group) int { return compareKey(a.key, b.key) })
		for _, g := range fs.groups {
			g.sortSlots()
		}

		for _, g := range fs.groups {
			switch {
			case !g.hasMaster:
				g.state = groupGone
				rb.repair(RepairSlotsWithoutMaster, fs.fam, 0, g.fe.String(), 0,
					"%s without master: deleted", plural("slot", len(g.slotNs), slotList(g.slotNs)))
				for _, s := range g.slotNs {
					fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(g.key, s))
				}
			case !g.key.Address.IsValid() || maps.FamilyOf(g.key.Address) != fs.fam:
				rb.remove(fs, g, RepairInvalidEntry, "frontend address "+g.key.Address.String()+" of the wrong family: service removed")
			case g.master.RevNATIndex == 0:
				rb.remove(fs, g, RepairInvalidEntry, "master has rev_nat_index 0: service removed")
			case !lb.L4Type(g.key.Proto).IsValid():
				rb.remove(fs, g, RepairInvalidEntry, "master has unknown protocol "+strconv.Itoa(int(g.key.Proto))+": service removed")
			case !lb.Scope(g.key.Scope).IsValid():
				rb.remove(fs, g, RepairInvalidEntry, "master has unknown scope "+strconv.Itoa(int(g.key.Scope))+": service removed")
			}
		}
	}
}

// remove deletes every entry of g's frontend, master first.
func (rb *rebuild) remove(fs *famState, g *group, kind RepairKind, detail string) {
	g.state = groupRemoved
	rb.svcRepair(kind, fs, g, 0, "%s", detail)
	fs.fixes.MasterDeletes = append(fs.fixes.MasterDeletes, g.key)
	for _, s := range g.slotNs {
		fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(g.key, s))
	}
}

// dedupeServiceIDs applies rule 3 over both families.
func (rb *rebuild) dedupeServiceIDs() {
	type cand struct {
		fs *famState
		g  *group
	}
	byID := make(map[uint16][]cand)
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.state == groupKept {
				byID[g.id()] = append(byID[g.id()], cand{fs, g})
			}
		}
	}
	for _, id := range sortedKeys(byID) {
		cs := byID[id]
		if len(cs) < 2 {
			continue
		}
		var matching []cand
		for _, c := range cs {
			if v, ok := c.fs.revnat[id]; ok && v == revNATValue(c.g.fe) {
				matching = append(matching, c)
			}
		}
		pool := cs
		if len(matching) > 0 {
			pool = matching
		}
		keep := slices.MinFunc(pool, func(a, b cand) int { return a.g.fe.Compare(b.g.fe) })
		for _, c := range cs {
			if c.g != keep.g {
				rb.remove(c.fs, c.g, RepairDuplicateServiceID,
					fmt.Sprintf("service ID %d also used by %s, which is kept: service removed", id, keep.g.fe))
			}
		}
	}
}

// rebuildServices applies rule 5 to every kept frontend of fs: a large
// family in two halves, the second on another goroutine with its own
// repair and fix lists (merged here; finish sorts them all).
func (rb *rebuild) rebuildServices(fs *famState) {
	run := func(rb *rebuild, fs *famState, gs []*group) {
		for _, g := range gs {
			if g.state == groupKept {
				rb.rebuildService(fs, g)
			}
		}
	}
	if len(fs.groups) < parallelGroups {
		run(rb, fs, fs.groups)
		return
	}
	half := len(fs.groups) / 2
	rb2 := &rebuild{out: &Restored{}, fam: rb.fam}
	fs2 := *fs
	fs2.fixes = &Fixes{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(rb2, &fs2, fs.groups[half:])
	}()
	run(rb, fs, fs.groups[:half])
	<-done
	rb.out.Repairs = append(rb.out.Repairs, rb2.out.Repairs...)
	fs.fixes.add(fs2.fixes)
}

// parallelGroups is the number of frontends from which rebuildServices
// splits the work (a variable for tests).
var parallelGroups = 512

type slotted struct {
	id lb.BackendID
	b  lb.Backend
}

// rebuildService applies rule 5 to a kept frontend.
func (rb *rebuild) rebuildService(fs *famState, g *group) {
	m := g.master
	n := int(m.Count) + int(m.QCount)
	list := rb.list[:0]
	defer func() { rb.list = list[:0] }()
	var missing []int
	dropped := false
	type first struct {
		slot int
		orig uint32 // backend ID of that slot before rewriting duplicates
	}
	seen := firstSeen[first]{}
	for s := 1; s <= n; s++ {
		v, ok := g.slot(uint16(s))
		if s > 0xFFFF || !ok {
			missing = append(missing, s)
			dropped = true
			continue
		}
		orig := v.BackendID
		id := orig
		if kept, ok := fs.alias[id]; ok {
			id = kept
		}
		bv, ok := fs.backends.get(id)
		if id == 0 || !ok {
			rb.svcRepair(RepairDanglingSlot, fs, g, orig, "slot %d points to missing backend %d: dropped", s, orig)
			dropped = true
			continue
		}
		b := BackendFromValue(bv)
		if b.State == lb.BackendStateMaintenance {
			rb.svcRepair(RepairDanglingSlot, fs, g, orig, "slot %d points to backend %d in maintenance: dropped", s, orig)
			dropped = true
			continue
		}
		if f, dup := seen.get(id); dup {
			switch {
			case orig != id:
				rb.svcRepair(RepairDuplicateBackend, fs, g, orig,
					"slot %d points to duplicate backend %d of backend %d, already in slot %d: dropped", s, orig, id, f.slot)
			case f.orig != id:
				rb.svcRepair(RepairDuplicateBackend, fs, g, orig,
					"slot %d points to backend %d, already in slot %d (rewritten from %d): dropped", s, id, f.slot, f.orig)
			default:
				rb.svcRepair(RepairInvalidEntry, fs, g, orig, "slot %d repeats backend %d of slot %d: dropped", s, orig, f.slot)
			}
			dropped = true
			continue
		}
		seen.put(id, first{s, orig})
		if orig != id {
			rb.svcRepair(RepairDuplicateBackend, fs, g, orig, "slot %d points to duplicate backend %d: rewritten to %d", s, orig, id)
		}
		switch {
		case v.RevNATIndex != m.RevNATIndex:
			rb.svcRepair(RepairInvalidEntry, fs, g, id, "slot %d has rev_nat_index %d, want %d: rewritten", s, v.RevNATIndex, m.RevNATIndex)
		case v.Count != 0 || v.QCount != 0 || v.Flags != 0 || v.Flags2 != 0:
			rb.svcRepair(RepairInvalidEntry, fs, g, id, "slot %d has stray count, qcount or flags: rewritten", s)
		}
		list = append(list, slotted{lb.BackendID(id), b})
	}
	if len(missing) > 0 {
		rb.svcRepair(RepairMissingSlot, fs, g, 0, "%s of count+qcount %d missing: dropped", plural("slot", len(missing), rangeList(missing)), n)
	}
	var extra []uint16
	for _, s := range g.slotNs {
		if int(s) > n {
			extra = append(extra, s)
		}
	}
	if len(extra) > 0 {
		rb.svcRepair(RepairExtraSlot, fs, g, 0, "%s beyond count+qcount %d: deleted", plural("slot", len(extra), slotList(extra)), n)
	}

	byRank := func(a, b slotted) int { return cmp.Compare(stateRank(a.b.State), stateRank(b.b.State)) }
	sorted, reordered := list, false
	if !slices.IsSortedFunc(list, byRank) { // the common case needs no copy
		sorted = slices.Clone(list)
		slices.SortStableFunc(sorted, byRank)
		reordered = true
	}

	svc := &Service{Spec: SpecFromMaster(g.fe, m)}
	if !svc.Spec.LBAlgorithm.IsValid() {
		svc.Spec.LBAlgorithm = lb.LBAlgDefault
	}
	if svc.Spec.SessionAffinity && svc.Spec.SessionAffinityTimeout == 0 {
		svc.Spec.SessionAffinityTimeout = lb.DefaultSessionAffinityTimeout
	}
	if len(sorted) > 0 { // a service without backends keeps nil slices
		svc.Spec.Backends = make([]lb.Backend, len(sorted))
		svc.BackendIDs = make([]lb.BackendID, len(sorted))
		for i, sl := range sorted {
			svc.Spec.Backends[i], svc.BackendIDs[i] = sl.b, sl.id
		}
	}
	g.svc = svc

	want := Master(svc)
	wv := want.Value
	countsWrong := !dropped && (wv.Count != m.Count || wv.QCount != m.QCount)
	switch {
	case reordered && countsWrong:
		rb.svcRepair(RepairSlotOrder, fs, g, 0, "slots not in state order (active, terminating, quarantined): reordered, count/qcount %d/%d -> %d/%d",
			m.Count, m.QCount, wv.Count, wv.QCount)
	case reordered:
		rb.svcRepair(RepairSlotOrder, fs, g, 0, "slots not in state order (active, terminating, quarantined): reordered")
	case countsWrong:
		rb.svcRepair(RepairSlotOrder, fs, g, 0, "count/qcount %d/%d wrong for the slot states: now %d/%d", m.Count, m.QCount, wv.Count, wv.QCount)
	}
	var diffs []string
	if m.BackendID != wv.BackendID {
		diffs = append(diffs, fmt.Sprintf("affinity/algorithm %#x -> %#x", m.BackendID, wv.BackendID))
	}
	if m.Flags != wv.Flags {
		diffs = append(diffs, fmt.Sprintf("flags 0x%02x -> 0x%02x", m.Flags, wv.Flags))
	}
	if m.Flags2 != wv.Flags2 {
		diffs = append(diffs, fmt.Sprintf("flags2 0x%02x -> 0x%02x", m.Flags2, wv.Flags2))
	}
	if len(diffs) > 0 {
		rb.svcRepair(RepairInvalidEntry, fs, g, 0, "master value not as the engine writes it (%s): rewritten", strings.Join(diffs, ", "))
	}

	if wv != m {
		fs.fixes.MasterWrites = append(fs.fixes.MasterWrites, want)
	}
	// The slots as Slots writes them, compared without building them.
	nslots := SlotCount(svc)
	for i := range nslots {
		want := slotValue(svc, i)
		if v, ok := g.slot(uint16(i + 1)); !ok || v != want {
			fs.fixes.SlotWrites = append(fs.fixes.SlotWrites, maps.ServiceEntry{Key: Key(svc.Frontend(), uint16(i+1)), Value: want})
		}
	}
	for _, s := range g.slotNs {
		if int(s) > nslots {
			fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(g.key, s))
		}
	}
}

// deleteOrphanBackends applies rule 6.
func (rb *rebuild) deleteOrphanBackends() {
	for _, fs := range rb.fam {
		used := fs.backends.marks()
		for _, g := range fs.groups {
			if g.svc != nil {
				for _, id := range g.svc.BackendIDs {
					used.mark(uint32(id))
				}
			}
		}
		for _, id := range fs.ids {
			if bv, ok := fs.backends.get(id); ok && !used.has(id) {
				b := BackendFromValue(bv)
				rb.repair(RepairOrphanBackend, fs.fam, 0, "", id, "backend %d (%s, %s) referenced by no slot: deleted", id, BackendKey(b), b.State)
				fs.fixes.BackendDeletes = append(fs.fixes.BackendDeletes, id)
			}
		}
	}
}

// reconcileRevNAT applies rule 7.
func (rb *rebuild) reconcileRevNAT() {
	kept := make(map[uint16]*famState) // service ID -> family of the kept service
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.svc == nil {
				continue
			}
			id := g.id()
			kept[id] = fs
			want := RevNAT(g.svc)
			v, ok := fs.revnat[id]
			switch {
			case !ok:
				rb.svcRepair(RepairMissingRevNAT, fs, g, 0, "no revNAT entry: written")
				fs.fixes.RevNATWrites = append(fs.fixes.RevNATWrites, want)
			case v != want.Value:
				rb.svcRepair(RepairWrongRevNAT, fs, g, 0, "revNAT entry points to %s, want %s: rewritten",
					addrPort(v), addrPort(want.Value))
				fs.fixes.RevNATWrites = append(fs.fixes.RevNATWrites, want)
			}
			ofs := rb.other(fs)
			if _, ok := ofs.revnat[id]; ok {
				rb.repair(RepairWrongRevNAT, ofs.fam, id, g.fe.String(), 0,
					"revNAT entry in the %s map for a service of the %s map: deleted", ofs.fam, fs.fam)
				ofs.fixes.RevNATDeletes = append(ofs.fixes.RevNATDeletes, id)
			}
		}
	}
	for _, fs := range rb.fam {
		for _, id := range fs.revIDs {
			if kept[id] != nil {
				continue // handled above
			}
			v := fs.revnat[id]
			if id == 0 {
				rb.repair(RepairInvalidEntry, fs.fam, 0, "", 0, "revNAT entry with the invalid ID 0 (%s): deleted", addrPort(v))
				fs.fixes.RevNATDeletes = append(fs.fixes.RevNATDeletes, id)
				continue
			}
			if g := removedOwner(fs, id, v); g != nil {
				rb.svcRepair(RepairInvalidEntry, fs, g, 0, "revNAT entry of the removed frontend: deleted")
				fs.fixes.RevNATDeletes = append(fs.fixes.RevNATDeletes, id)
				continue
			}
			rb.out.OrphanRevNAT = append(rb.out.OrphanRevNAT, maps.RevNATEntry{ID: id, Value: v})
			rb.repair(RepairOrphanRevNAT, fs.fam, id, "", 0, "revNAT entry %s of no service: deleted", addrPort(v))
			fs.fixes.RevNATDeletes = append(fs.fixes.RevNATDeletes, id)
		}
	}
}

// removedOwner returns the first frontend of fs removed by rule 2 or 3 with
// service ID id whose address and port are v, or nil.
func removedOwner(fs *famState, id uint16, v maps.RevNATValue) *group {
	for _, g := range fs.groups {
		if g.state == groupRemoved && g.id() == id && revNATValue(g.fe) == v {
			return g
		}
	}
	return nil
}

// finish sorts every output.
func (rb *rebuild) finish() {
	for _, fs := range rb.fam {
		fs.fixes.sort()
		for _, g := range fs.groups {
			if g.svc != nil {
				rb.out.Services = append(rb.out.Services, g.svc)
			}
		}
	}
	slices.SortFunc(rb.out.Services, func(a, b *Service) int { return cmp.Compare(a.ID(), b.ID()) })
	slices.SortFunc(rb.out.Repairs, func(a, b Repair) int {
		return cmp.Or(
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Family, b.Family),
			cmp.Compare(a.ServiceID, b.ServiceID),
			cmp.Compare(a.Frontend, b.Frontend),
			cmp.Compare(a.BackendID, b.BackendID),
			cmp.Compare(a.Detail, b.Detail),
		)
	})
}

// add appends o's fixes to f's.
func (f *Fixes) add(o *Fixes) {
	f.RevNATWrites = append(f.RevNATWrites, o.RevNATWrites...)
	f.MasterDeletes = append(f.MasterDeletes, o.MasterDeletes...)
	f.SlotWrites = append(f.SlotWrites, o.SlotWrites...)
	f.MasterWrites = append(f.MasterWrites, o.MasterWrites...)
	f.SlotDeletes = append(f.SlotDeletes, o.SlotDeletes...)
	f.BackendDeletes = append(f.BackendDeletes, o.BackendDeletes...)
	f.RevNATDeletes = append(f.RevNATDeletes, o.RevNATDeletes...)
}

func (f *Fixes) sort() {
	byKey := func(a, b maps.ServiceKey) int { return compareKey(a, b) }
	byEntry := func(a, b maps.ServiceEntry) int { return compareKey(a.Key, b.Key) }
	byRevNAT := func(a, b maps.RevNATEntry) int { return cmp.Compare(a.ID, b.ID) }
	slices.SortFunc(f.RevNATWrites, byRevNAT)
	slices.SortFunc(f.MasterDeletes, byKey)
	f.MasterDeletes = slices.Compact(f.MasterDeletes)
	slices.SortFunc(f.SlotWrites, byEntry)
	slices.SortFunc(f.MasterWrites, byEntry)
	slices.SortFunc(f.SlotDeletes, byKey)
	f.SlotDeletes = slices.Compact(f.SlotDeletes)
	slices.Sort(f.BackendDeletes)
	f.BackendDeletes = slices.Compact(f.BackendDeletes)
	slices.Sort(f.RevNATDeletes)
	f.RevNATDeletes = slices.Compact(f.RevNATDeletes)
}

// Helpers.

// firstSeen is a small set of backend IDs with a value each: an array up
// to 16 entries (most services, no allocation), a map beyond.
type firstSeen[V any] struct {
	n    int
	ids  [16]uint32
	vals [16]V
	m    map[uint32]V // past 16
}

func (f *firstSeen[V]) get(id uint32) (V, bool) {
	if f.m != nil {
		v, ok := f.m[id]
		return v, ok
	}
	for i, x := range f.ids[:f.n] {
		if x == id {
			return f.vals[i], true
		}
	}
	var zero V
	return zero, false
}

func (f *firstSeen[V]) put(id uint32, v V) {
	if f.m == nil && f.n < len(f.ids) {
		f.ids[f.n], f.vals[f.n] = id, v
		f.n++
		return
	}
	if f.m == nil {
		f.m = make(map[uint32]V, 2*f.n)
		for i, x := range f.ids[:f.n] {
			f.m[x] = f.vals[i]
		}
	}
	f.m[id] = v
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func slotKey(k maps.ServiceKey, slot uint16) maps.ServiceKey {
	k.Slot = slot
	return k
}

func revNATValue(fe lb.L3n4Addr) maps.RevNATValue {
	return maps.RevNATValue{Address: fe.Addr, Port: fe.Port}
}

func addrPort(v maps.RevNATValue) string {
	if !v.Address.IsValid() {
		return "invalid address:" + strconv.Itoa(int(v.Port))
	}
	return lb.L3n4Addr{Addr: v.Address, Port: v.Port}.AddrPort().String()
}

// compareKey orders service keys by frontend (address, port, protocol,
// scope), then slot.
func compareKey(a, b maps.ServiceKey) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto),
		cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Slot, b.Slot))
}

func compareServiceValue(a, b maps.ServiceValue) int {
	return cmp.Or(cmp.Compare(a.BackendID, b.BackendID), cmp.Compare(a.Count, b.Count), cmp.Compare(a.QCount, b.QCount),
		cmp.Compare(a.RevNATIndex, b.RevNATIndex), cmp.Compare(a.Flags, b.Flags), cmp.Compare(a.Flags2, b.Flags2))
}

func compareBackend(a, b maps.BackendValue) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto),
		cmp.Compare(a.State, b.State), cmp.Compare(a.ClusterID, b.ClusterID), cmp.Compare(a.Zone, b.Zone))
}

func compareRevNAT(a, b maps.RevNATValue) int {
	return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port))
}

// plural returns "slot 3" or "slots 1-2, 5".
func plural(noun string, n int, list string) string {
	if n == 1 {
		return noun + " " + list
	}
	return noun + "s " + list
}

func slotList(ss []uint16) string {
	ints := make([]int, len(ss))
	for i, s := range ss {
		ints[i] = int(s)
	}
	return rangeList(ints)
}

// rangeList formats ascending integers as "1-3, 5".
func rangeList(xs []int) string {
	var b strings.Builder
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(xs[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(xs[j]))
		}
		i = j + 1
	}
	return b.String()
}
