package table

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// The repair rules of Rebuild, one function each, in the order of their
// numbers (the package doc defines them; Rebuild shows the order they run
// in). Loading is in load.go, the output types in fixes.go, the ID sets the
// rules use in backendset.go.

// Rebuild rebuilds the engine's table from the dumped maps, which are the
// only source of truth, and computes the writes that repair them, by the
// rules 1-10 of the package doc. It is deterministic: the same entries in any
// order give the same result. A dump of what the engine itself writes
// (Master, Slots, BackendEntry, RevNAT) gives no fixes and no repairs.
//
// Decisions the design left open, taken in the rules:
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
//
// Concurrency: Rebuild starts goroutines at two places, one at a time, and
// returns only when they are done. At loading, the service entries load
// (with rules 1 and 2), the backend entries (with rule 4) and the revNAT
// entries, each on a goroutine of its own (Loader). At rule 5, a family
// of parallelGroups frontends or more is rebuilt in two halves
// (rebuildServices). Each goroutine has its own rebuild (repair list and
// scratch) and writes nothing another one reads or writes; the lists are
// joined when both are done and finish sorts them, so the output is the
// serial one (TestRebuildInHalvesEqualsSerial).
func Rebuild(d Dump) *Restored {
	return NewLoader().Rebuild(d)
}

// Loader is Rebuild for a dump that comes in parts: restore streams the
// map owners' dumps into it as they arrive, so that one part loads while
// the maps of the other are still being read. Backends starts loading
// the revNAT and backend entries (with rule 4), Services the service
// entries (with rules 1 and 2), each on a goroutine of its own (the
// revNAT entries on one more, beside rule 4, which reads none), as soon
// as its entries are there, in either order; Rebuild waits for them,
// loads what was not started (both parts at once, as Rebuild does, when
// neither was) and applies the other rules. The result is Rebuild's on
// the whole dump (TestLoaderInPartsEqualsRebuild): the two parts write
// disjoint fields of the famStates (groups, MasterDeletes and SlotDeletes
// for the services; revnat and revIDs, and backends, alias, ids and
// BackendDeletes, for the backends) and repair lists of their own, joined
// in a fixed order, and nothing reads them before Rebuild has waited. A
// Loader is used once, by one goroutine at a time, with the same entries
// in every call; the entries must not change until Rebuild returns. A
// Loader dropped before Rebuild lets its goroutines finish on their own.
type Loader struct {
	rb, svcs           *rebuild
	backends, services chan struct{} // closed when the part is loaded; nil until started
}

// NewLoader returns a Loader with nothing loaded.
func NewLoader() *Loader {
	rb := &rebuild{out: &Restored{}}
	for i, f := range families {
		rb.fam[i] = &famState{fam: f, fixes: rb.out.Fixes(f)}
	}
	return &Loader{rb: rb, svcs: &rebuild{out: &Restored{}, fam: rb.fam}}
}

// Backends starts loading the backend and revNAT entries of both families
// (by family: IPv4, IPv6) and applying rule 4, unless started already.
func (l *Loader) Backends(backends [2]maps.Entries[maps.BackendEntry], revNAT [2][]maps.RevNATEntry) {
	if l.backends != nil {
		return
	}
	done := make(chan struct{})
	l.backends = done
	go func() {
		defer close(done)
		var rev sync.WaitGroup
		rev.Go(func() { l.rb.loadRevNAT(revNAT) }) // beside: rule 4 reads no revNAT entry
		l.rb.loadBackends(backends)
		l.rb.filterBackends() // rule 4
		rev.Wait()
	}()
}

// Services starts loading the service entries of both families (by
// family: IPv4, IPv6) and applying rules 1 and 2, unless started already.
func (l *Loader) Services(services [2]maps.Entries[maps.ServiceEntry]) {
	if l.services != nil {
		return
	}
	done := make(chan struct{})
	l.services = done
	go func() {
		defer close(done)
		l.svcs.loadServices(services)
		l.svcs.pairScopes()
		l.svcs.deleteSlotsWithoutMaster() // rule 1
		l.svcs.removeInvalidFrontends()   // rule 2
	}()
}

// Rebuild loads what is not loaded yet of d and rebuilds the table from
// it, as the package's Rebuild.
func (l *Loader) Rebuild(d Dump) *Restored {
	rb := l.rb
	l.Services(d.services())
	l.Backends(d.backends())
	<-l.services
	<-l.backends
	rb.out.Repairs = append(rb.out.Repairs, l.svcs.out.Repairs...)
	rb.loadMembers(d)
	rb.loadSourceRanges(d)
	rb.dedupeServiceIDs() // rule 3
	for _, fs := range rb.fam {
		rb.rebuildServices(fs) // rule 5 (parallel halves for a large family)
	}
	rb.deleteOrphanBackends()   // rule 6
	rb.reconcileRevNAT()        // rule 7
	rb.reconcileMembers(d)      // rules 8 and 9
	rb.reconcileSourceRanges(d) // rule 10
	rb.finish()
	return rb.out
}

type famState struct {
	fam      maps.Family
	fixes    *Fixes
	backends backendSet        // valid backends, after rule 4
	alias    map[uint32]uint32 // duplicate backend ID -> kept ID (rule 4)
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
	// members are the lb_members entries by service ID (loadMembers); read
	// only once loaded.
	members map[uint16][]maps.MemberEntry
	// sources are the services' sources from their lb_members records
	// (loadMembers); a service without one is SourceAPI.
	sources map[uint16]lb.Source
	// ranges are the valid source ranges by family and service ID
	// (loadSourceRanges); read only once loaded.
	ranges map[rangeOwner][]netip.Prefix
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

// deleteSlotsWithoutMaster applies rule 1: the slots of a frontend that has
// no master are deleted, and the frontend is gone for the later rules.
func (rb *rebuild) deleteSlotsWithoutMaster() {
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.hasMaster {
				continue
			}
			g.state = groupGone
			rb.repair(RepairSlotsWithoutMaster, fs.fam, 0, g.fe.String(), 0,
				"%s without master: deleted", plural("slot", len(g.slotNs), slotList(g.slotNs)))
			for _, s := range g.slotNs {
				fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(g.key, s))
			}
		}
	}
}

// removeInvalidFrontends applies rule 2: a frontend with a master is
// removed if its address is of the wrong family, its master has
// rev_nat_index 0, or its protocol or scope is unknown (the first reason
// found is reported).
func (rb *rebuild) removeInvalidFrontends() {
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			switch {
			case !g.hasMaster:
				// rule 1's
			case !g.key.Address.IsValid() || maps.FamilyOf(g.key.Address) != fs.fam:
				rb.remove(fs, g, RepairInvalidEntry, "frontend address "+g.key.Address.String()+" of the wrong family: service removed")
			case g.master.RevNATIndex == 0:
				rb.remove(fs, g, RepairInvalidEntry, "master has rev_nat_index 0: service removed")
			case !lb.L4Type(g.key.Proto).IsValid():
				rb.remove(fs, g, RepairInvalidEntry, "master has unknown protocol "+strconv.Itoa(int(g.key.Proto))+": service removed")
			case !lb.Scope(g.key.Scope).IsValid():
				rb.remove(fs, g, RepairInvalidEntry, "master has unknown scope "+strconv.Itoa(int(g.key.Scope))+": service removed")
			case g.key.Scope == uint8(lb.ScopeInternal) && groupHasTwoScopes(g):
				// pairScopes found no external master of a two-scope
				// service for it: the internal set of a service that is gone.
				rb.remove(fs, g, RepairInvalidEntry, "internal backend set of a two-scope service without its external master: removed")
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
	if in := g.inner; in != nil { // the internal set goes with it
		if in.hasMaster {
			fs.fixes.MasterDeletes = append(fs.fixes.MasterDeletes, in.key)
		}
		for _, s := range in.slotNs {
			fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(in.key, s))
		}
	}
}

// dedupeServiceIDs applies rule 3 over both families (one ID space): of
// the frontends left by rules 1 and 2 that share a service ID, one is kept,
// preferring those whose revNAT entry matches, and the others removed.
// Most IDs have one frontend: a first pass counts them in an array over
// the 16-bit ID space, and only the IDs with two or more are gathered,
// in ID order.
func (rb *rebuild) dedupeServiceIDs() {
	type cand struct {
		fs *famState
		g  *group
	}
	seen := make([]uint8, 1<<16) // kept frontends by ID: 0, 1, or 2 for two or more
	var dups []uint16
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.state != groupKept {
				continue
			}
			switch id := g.id(); seen[id] {
			case 0:
				seen[id] = 1
			case 1:
				seen[id] = 2
				dups = append(dups, id)
			}
		}
	}
	if len(dups) == 0 {
		return
	}
	byID := make(map[uint16][]cand, len(dups))
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.state == groupKept && seen[g.id()] == 2 {
				byID[g.id()] = append(byID[g.id()], cand{fs, g})
			}
		}
	}
	slices.Sort(dups)
	for _, id := range dups {
		cs := byID[id]
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

// filterBackends applies rule 4 to the loaded backends: (a) invalid
// backends, (b) IDs in both families and (c) duplicate backend addresses
// are deleted; (c) records each deleted duplicate in alias for rule 5.
func (rb *rebuild) filterBackends() {
	var ids [2][]uint32 // valid backend IDs of each family, sorted
	for i, fs := range rb.fam {
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
		// keeps), in a key without pointers; an IPv4 one (every backend
		// of the IPv4 family, after the filter above) packs into a
		// uint64, which the map hashes as a word.
		type identity struct {
			addr  [16]byte
			port  uint16
			proto uint8
		}
		var byKey map[identity]uint32
		var byPacked map[uint64]uint32
		if fs.fam == maps.IPv4 {
			byPacked = make(map[uint64]uint32, len(ids[i]))
		} else {
			byKey = make(map[identity]uint32, len(ids[i]))
		}
		for _, id := range ids[i] { // by ID: the lowest of duplicates is kept
			v, _ := fs.backends.get(id)
			var kept uint32
			var dup bool
			if byPacked != nil {
				pk := packBackend4(v)
				if kept, dup = byPacked[pk]; !dup {
					byPacked[pk] = id
					continue
				}
			} else {
				ik := identity{v.Address.As16(), v.Port, v.Proto}
				if kept, dup = byKey[ik]; !dup {
					byKey[ik] = id
					continue
				}
			}
			k := BackendKey(BackendFromValue(v))
			rb.repair(RepairDuplicateBackend, fs.fam, 0, "", id, "backend %d duplicates backend %d (%s): deleted", id, kept, k)
			fs.alias[id] = kept
			fs.backends.drop(id)
			fs.fixes.BackendDeletes = append(fs.fixes.BackendDeletes, id)
		}
	}
}

// packBackend4 packs the identity of IPv4 backend v (address, port,
// protocol): address in bits 32-63, port in 8-23, protocol in 0-7.
func packBackend4(v maps.BackendValue) uint64 {
	a := v.Address.As4() // IPv4: checked by invalidBackend
	return uint64(a[0])<<56 | uint64(a[1])<<48 | uint64(a[2])<<40 | uint64(a[3])<<32 | uint64(v.Port)<<8 | uint64(v.Proto)
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

// rebuildServices applies rule 5 to every frontend of fs kept by rules 1-3,
// one at a time (rebuildService).
//
// Parallel halves: a family of parallelGroups frontends or more is rebuilt
// in two halves, the second on another goroutine with its own rebuild
// (repair list and scratch) and its own Fixes (fs2, a copy of fs with fresh
// fixes). Both halves only read fs's backends and alias (rule 4 is done
// with them) and each writes only the groups of its half. The halves are
// joined here, and finish sorts every list, so the result is the serial
// one (TestRebuildInHalvesEqualsSerial).
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
	rb2 := &rebuild{out: &Restored{}, fam: rb.fam, members: rb.members, sources: rb.sources, ranges: rb.ranges}
	fs2 := *fs
	fs2.fixes = &Fixes{}
	done := make(chan struct{})
	go func() { // the second half, beside the first
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

// rebuildService applies rule 5 to a kept frontend: the service is what
// its master and slots 1..count+qcount say, less what cannot be served, in
// slot order; its master and slots are rewritten to what the engine writes
// for it.
func (rb *rebuild) rebuildService(fs *famState, g *group) {
	m := g.master
	var ranged Service
	if !rb.sourceRangesOf(fs.fam, m, &ranged) {
		rb.remove(fs, g, RepairSourceRange, "master carries the source-range flag but the maps hold none of its ranges: service removed (nothing opened by accident)")
		return
	}
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
		rb.memberOf(&b, id, m.RevNATIndex)
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
	// The backends only the internal set has (two scopes) and those
	// recorded in lb_members join the service. A service with such
	// backends, or whose one set is node-local, gets the engine's own
	// order (state, then address): which of its backends have slots
	// depends on lb_members, so slot order alone is not stable.
	extraBEs := rb.extraBackends(fs, g, list)
	if spec := SpecFromMaster(g.fe, m); len(extraBEs) > 0 || spec.ScopeLocal(lb.ScopeExternal) {
		sorted = append(slices.Clone(sorted), extraBEs...)
		slices.SortStableFunc(sorted, func(a, b slotted) int {
			return cmp.Or(byRank(a, b), a.b.L3n4Addr.Compare(b.b.L3n4Addr))
		})
		if !reordered {
			var ext []slotted
			for _, sl := range sorted {
				if sl.b.State != lb.BackendStateMaintenance && (sl.b.NodeLocal || !spec.ScopeLocal(lb.ScopeExternal)) {
					ext = append(ext, sl)
				}
			}
			if !slices.EqualFunc(ext, list, func(a, b slotted) bool { return a.id == b.id }) && len(ext) == len(list) {
				rb.svcRepair(RepairSlotOrder, fs, g, 0, "slots not in the engine's order (state, then address): reordered")
			}
		}
	}

	svc := &Service{Spec: SpecFromMaster(g.fe, m)}
	svc.Spec.SourceRanges, svc.Spec.SourceRangesDeny = ranged.Spec.SourceRanges, ranged.Spec.SourceRangesDeny
	svc.Spec.Source = rb.sources[m.RevNATIndex] // an unknown one was left out: rule 8 rewrites the record
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
	_, extIDs := ScopeSet(svc, lb.ScopeExternal)
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
		want := slotValueOf(svc, extIDs, i)
		if v, ok := g.slot(uint16(i + 1)); !ok || v != want {
			fs.fixes.SlotWrites = append(fs.fixes.SlotWrites, maps.ServiceEntry{Key: Key(svc.Frontend(), uint16(i+1)), Value: want})
		}
	}
	for _, s := range g.slotNs {
		if int(s) > nslots {
			fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(g.key, s))
		}
	}
	rb.fixInnerScope(fs, g, svc)
}

// memberOf sets b's weight and node-local flag from its lb_members entry
// in service rev, if any (none: the defaults).
func (rb *rebuild) memberOf(b *lb.Backend, id uint32, rev uint16) {
	es := rb.members[rev] // sorted by backend ID (loadMembers)
	if i, ok := slices.BinarySearchFunc(es, id, func(e maps.MemberEntry, id uint32) int { return cmp.Compare(e.Key.BackendID, id) }); ok {
		b.Weight = es[i].Value.Weight
		b.NodeLocal = es[i].Value.Flags&maps.MemberNodeLocal != 0
	}
}

// extraBackends returns the backends of g's service that its external
// slots (list) do not name: those of its internal set (two scopes) and
// those recorded in lb_members (maintenance backends, and those left out
// of a node-local set). A slot of the
// internal set naming a missing backend or one in maintenance is
// dropped (rewritten by fixInnerScope).
func (rb *rebuild) extraBackends(fs *famState, g *group, list []slotted) []slotted {
	rev := g.master.RevNATIndex
	if g.inner == nil && len(rb.members[rev]) == 0 {
		return nil
	}
	have := make(map[lb.BackendID]bool, len(list))
	for _, sl := range list {
		have[sl.id] = true
	}
	var out []slotted
	add := func(id uint32, wantMaint bool) {
		if kept, ok := fs.alias[id]; ok {
			id = kept
		}
		bv, ok := fs.backends.get(id)
		if id == 0 || !ok || have[lb.BackendID(id)] {
			return
		}
		b := BackendFromValue(bv)
		if (b.State == lb.BackendStateMaintenance) != wantMaint {
			return
		}
		rb.memberOf(&b, id, rev)
		have[lb.BackendID(id)] = true
		out = append(out, slotted{lb.BackendID(id), b})
	}
	if in := g.inner; in != nil {
		n := int(in.master.Count) + int(in.master.QCount)
		for i, s := range in.slotNs {
			if int(s) <= n {
				add(in.slotVs[i].BackendID, false)
			}
		}
	}
	for _, e := range rb.members[rev] {
		if e.Key.BackendID != 0 {
			add(e.Key.BackendID, true)
			add(e.Key.BackendID, false)
		}
	}
	return out
}

// fixInnerScope makes the internal-scope entries of g's frontend what the
// engine writes for svc: its internal set if it has two scopes, nothing
// if not.
func (rb *rebuild) fixInnerScope(fs *famState, g *group, svc *Service) {
	in := g.inner
	if !svc.Spec.TwoScopes() {
		if in != nil {
			rb.svcRepair(RepairInvalidEntry, fs, g, 0, "internal-scope entries of a service with one backend set: deleted")
			if in.hasMaster {
				fs.fixes.MasterDeletes = append(fs.fixes.MasterDeletes, in.key)
			}
			for _, s := range in.slotNs {
				fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(in.key, s))
			}
		}
		return
	}
	want := MasterAt(svc, lb.ScopeInternal)
	_, ids := ScopeSet(svc, lb.ScopeInternal)
	n := SlotCountAt(svc, lb.ScopeInternal)
	slot := func(s uint16) (maps.ServiceValue, bool) { return maps.ServiceValue{}, false }
	if in != nil {
		slot = in.slot
	}
	wrong := in == nil || !in.hasMaster || in.master != want.Value
	for i := range n {
		w := slotValueOf(svc, ids, i)
		if v, ok := slot(uint16(i + 1)); !ok || v != w {
			wrong = true
			fs.fixes.SlotWrites = append(fs.fixes.SlotWrites, maps.ServiceEntry{Key: ScopeKey(svc.Frontend(), lb.ScopeInternal, uint16(i+1)), Value: w})
		}
	}
	if in == nil || !in.hasMaster || in.master != want.Value {
		fs.fixes.MasterWrites = append(fs.fixes.MasterWrites, want)
	}
	if in != nil {
		for _, s := range in.slotNs {
			if int(s) > n {
				wrong = true
				fs.fixes.SlotDeletes = append(fs.fixes.SlotDeletes, slotKey(in.key, s))
			}
		}
	}
	if wrong {
		rb.svcRepair(RepairMissingSlot, fs, g, 0, "internal backend set not as the engine writes it: rewritten")
	}
}

// reconcileMembers applies rules 8 and 9: lb_members and
// lb_affinity_match hold exactly what the engine writes for the rebuilt
// services.
func (rb *rebuild) reconcileMembers(d Dump) {
	mf := &rb.out.Members
	wantM := map[maps.MemberKey]maps.MemberValue{}
	wantA := map[maps.AffinityMatchKey]bool{}
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.svc == nil {
				continue
			}
			for _, e := range MemberEntries(g.svc) {
				wantM[e.Key] = e.Value
			}
			for _, k := range AffinityMatches(g.svc) {
				wantA[k] = true
			}
		}
	}
	have := make(map[maps.MemberKey]maps.MemberValue, len(d.Members))
	for _, e := range d.Members {
		have[e.Key] = e.Value
	}
	for k, v := range have {
		if _, ok := wantM[k]; !ok {
			rb.repair(RepairMember, 0, k.RevNATIndex, "", k.BackendID, "lb_members entry of no backend of a service: deleted")
			mf.MemberDeletes = append(mf.MemberDeletes, k)
		} else if wantM[k] != v {
			rb.repair(RepairMember, 0, k.RevNATIndex, "", k.BackendID, "lb_members entry %+v, want %+v: rewritten", v, wantM[k])
			mf.MemberWrites = append(mf.MemberWrites, maps.MemberEntry{Key: k, Value: wantM[k]})
		}
	}
	for k, v := range wantM {
		if _, ok := have[k]; !ok {
			rb.repair(RepairMember, 0, k.RevNATIndex, "", k.BackendID, "lb_members entry missing: written")
			mf.MemberWrites = append(mf.MemberWrites, maps.MemberEntry{Key: k, Value: v})
		}
	}
	hasA := make(map[maps.AffinityMatchKey]bool, len(d.AffinityMatch))
	for _, k := range d.AffinityMatch {
		hasA[k] = true
		if !wantA[k] {
			rb.repair(RepairAffinityMatch, 0, k.RevNATIndex, "", k.BackendID, "affinity match of no backend of a session-affinity service: deleted")
			mf.MatchDeletes = append(mf.MatchDeletes, k)
		}
	}
	for k := range wantA {
		if !hasA[k] {
			rb.repair(RepairAffinityMatch, 0, k.RevNATIndex, "", k.BackendID, "affinity match missing: written")
			mf.MatchWrites = append(mf.MatchWrites, k)
		}
	}
}

// deleteOrphanBackends applies rule 6: a backend left by rule 4 that no
// slot of a rebuilt service refers to is deleted.
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

// reconcileRevNAT applies rule 7: every rebuilt service has its revNAT
// entry in its family's map and none in the other's; every other entry is
// deleted.
func (rb *rebuild) reconcileRevNAT() {
	kept := make([]bool, 1<<16) // by service ID: a kept service has it
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.svc == nil {
				continue
			}
			id := g.id()
			kept[id] = true
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
			if kept[id] {
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
	rb.out.Members.sort()
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

// Helpers of the rules.

func slotKey(k maps.ServiceKey, slot uint16) maps.ServiceKey {
	k.Slot = slot
	return k
}

func revNATValue(fe lb.L3n4Addr) maps.RevNATValue {
	return maps.RevNATValue{Address: fe.Addr, Port: fe.Port}
}
