package table

import (
	"cmp"
	mathbits "math/bits"
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// Loading is the step before the rules: every input list is normalized
// (IPv4 addresses of the v4 maps unmapped), one entry is kept per key (the
// least value in the fixed order of the compare functions below, should a
// hand-made dump repeat a key) and the service entries are grouped by
// frontend. Nothing is repaired here; the rules (rules.go) do that.

// Dump is what was read back from the maps.
type Dump struct {
	Services4, Services6 []maps.ServiceEntry
	Backends4, Backends6 []maps.BackendEntry
	RevNAT4, RevNAT6     []maps.RevNATEntry
	Members              []maps.MemberEntry
	AffinityMatch        []maps.AffinityMatchKey
	// SourceRanges are the entries of lb4_source_range and
	// lb6_source_range (each key's family is its address's).
	SourceRanges []maps.SourceRangeKey
}

// services returns d's service entries by family, as Loader.Services
// takes them.
func (d *Dump) services() [2]maps.Entries[maps.ServiceEntry] {
	return [2]maps.Entries[maps.ServiceEntry]{maps.EntriesOf(d.Services4), maps.EntriesOf(d.Services6)}
}

// backends returns d's backend and revNAT entries by family, as
// Loader.Backends takes them.
func (d *Dump) backends() ([2]maps.Entries[maps.BackendEntry], [2][]maps.RevNATEntry) {
	return [2]maps.Entries[maps.BackendEntry]{maps.EntriesOf(d.Backends4), maps.EntriesOf(d.Backends6)},
		[2][]maps.RevNATEntry{d.RevNAT4, d.RevNAT6}
}

var families = [2]maps.Family{maps.IPv4, maps.IPv6}

type groupState int

const (
	groupKept    groupState = iota
	groupRemoved            // removed by rule 2 (invalid) or 3 (duplicate ID)
	groupGone               // slots without master (rule 1)
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
	state     groupState          // set by rules 1-3
	svc       *Service            // the rebuilt service (rule 5), nil if not kept
	// inner is the internal-scope set of a two-scope service (its master
	// has Flag2TwoScopes and the same service ID): pairScopes attaches it
	// here and takes it out of the groups, so rules 3 and 5 see one
	// service.
	inner *group
}

func (g *group) id() uint16 { return g.master.RevNATIndex }

// sortSlots orders the slots by number and keeps the least value of a
// repeated one (most groups have a few dozen slots: an insertion sort).
// The common case, slots 1..n in any order, is put in place directly.
func (g *group) sortSlots() {
	ns, vs := g.slotNs, g.slotVs
	if placeSlots(ns, vs) {
		return
	}
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

// placeSlots puts ns (and vs along) in order if they are exactly the
// numbers 1..len(ns) (up to 64), and reports whether it did.
func placeSlots(ns []uint16, vs []maps.ServiceValue) bool {
	n := len(ns)
	if n > 64 {
		return false
	}
	var seen uint64
	for _, s := range ns {
		if s == 0 || int(s) > n || seen&(1<<(s-1)) != 0 {
			return false
		}
		seen |= 1 << (s - 1)
	}
	var tmp [64]maps.ServiceValue
	copy(tmp[:n], vs)
	var tn [64]uint16
	copy(tn[:n], ns)
	for i := range n {
		ns[tn[i]-1], vs[tn[i]-1] = tn[i], tmp[i]
	}
	return true
}

// slot returns the value of slot n, if the map has it.
func (g *group) slot(n uint16) (maps.ServiceValue, bool) {
	if i := int(n) - 1; i >= 0 && i < len(g.slotNs) && g.slotNs[i] == n { // slots 1..n: at n-1
		return g.slotVs[i], true
	}
	if i, ok := slices.BinarySearch(g.slotNs, n); ok {
		return g.slotVs[i], true
	}
	return maps.ServiceValue{}, false
}

// loadRevNAT indexes each family's revNAT entries by ID, one value per ID
// (the least, if a dump repeats an ID). Rule 7 reconciles them. The IDs
// are 16 bits: a bitset of the IDs seen gives them in ascending order,
// with no sort (10k entries: 0.6 ms against 2.6 with the sort, in a
// scratch benchmark).
func (rb *rebuild) loadRevNAT(in [2][]maps.RevNATEntry) {
	for i, fs := range rb.fam {
		es := in[i]
		fs.revnat = make(map[uint16]maps.RevNATValue, len(es))
		var seen [1 << 16 / 64]uint64
		for _, e := range es {
			v := e.Value
			if fs.fam == maps.IPv4 {
				v.Address = v.Address.Unmap()
			}
			if cur, dup := fs.revnat[e.ID]; dup && compareRevNAT(cur, v) <= 0 {
				continue
			}
			fs.revnat[e.ID] = v
			seen[e.ID/64] |= 1 << (e.ID % 64)
		}
		if len(fs.revnat) == 0 {
			continue
		}
		fs.revIDs = make([]uint16, 0, len(fs.revnat))
		for w, bits := range seen {
			for ; bits != 0; bits &= bits - 1 {
				fs.revIDs = append(fs.revIDs, uint16(w*64+mathbits.TrailingZeros64(bits)))
			}
		}
	}
}

// loadBackends indexes each family's backend entries by ID, one value per
// ID (the least, if a dump repeats an ID). Rule 4 filters them.
func (rb *rebuild) loadBackends(in [2]maps.Entries[maps.BackendEntry]) {
	for i, fs := range rb.fam {
		fs.backends = newBackendSet(in[i], fs.fam == maps.IPv4)
	}
}

// loadServices groups the service entries by frontend: one group per
// frontend, its master and its slots sorted by number. Rules 1 and 2 then
// check the groups.
func (rb *rebuild) loadServices(in [2]maps.Entries[maps.ServiceEntry]) {
	for i, fs := range rb.fam {
		fs.groups = groupServices(in[i], fs.fam == maps.IPv4)
	}
}

// groupServices groups es by frontend (IPv4-mapped addresses unmapped
// when unmap is set), each group's slots sorted by number, the groups by
// key. A dump comes in the kernel's hash order, a frontend's entries
// scattered over it, so:
//   - the first pass finds each entry's frontend with a map (an IPv4
//     frontend's key packs into a uint64: address, port, protocol, scope,
//     so that the map hashes a word; other frontends use the whole key),
//     and counts each frontend's slots, in small arrays indexed by
//     frontend (nothing large touched per entry);
//   - the frontends are sorted by key (packed keys as numbers, in the same
//     order as compareKey), then the groups made in that order in one
//     array;
//   - the second pass copies the slots, each group's carved from one
//     array, and each group's slots are put in order.
func groupServices(es maps.Entries[maps.ServiceEntry], unmap bool) []*group {
	type feIdx struct {
		addr        [16]byte
		v4          bool
		port        uint16
		proto, scop uint8
	}
	// Every frontend has a master, but for what a crash cut short: the
	// masters' count sizes the arrays by frontend (grown by doubling, they
	// would allocate about twice as much, and every fresh page costs a
	// fault).
	buf := make([]maps.ServiceEntry, min(maps.ChunkLen, es.Len())) // each pass decodes the entries a chunk at a time into it
	nfe := 0
	for chunk := range es.Chunks(buf) {
		for i := range chunk {
			if chunk[i].Key.Slot == 0 {
				nfe++
			}
		}
	}
	// The IPv4 family's frontends pack, the IPv6 family's do not.
	packHint, wholeHint := nfe, 0
	if !unmap {
		packHint, wholeHint = 0, nfe
	}
	packed := make(map[uint64]int32, packHint)
	var whole map[feIdx]int32 // frontends that do not pack (IPv6, invalid)
	var (
		keys   = make([]maps.ServiceKey, 0, nfe)   // by frontend, slot 0
		pks    = make([]uint64, 0, nfe)            // packed keys, by frontend (0 if whole)
		master = make([]maps.ServiceValue, 0, nfe) // the master kept, by frontend
		hasM   = make([]bool, 0, nfe)              // whether the frontend has a master
		nsl    = make([]int32, 0, nfe)             // slots, by frontend
	)
	at := make([]int32, es.Len()) // entry -> frontend, -1 for a master
	j := -1
	for chunk := range es.Chunks(buf) {
		for ci := range chunk {
			e := &chunk[ci]
			j++
			k := e.Key
			if unmap {
				k.Address = k.Address.Unmap()
			}
			slot := k.Slot
			k.Slot = 0
			var fi int32
			var ok bool
			var pk uint64
			if k.Address.Is4() {
				a := k.Address.As4()
				pk = uint64(a[0])<<56 | uint64(a[1])<<48 | uint64(a[2])<<40 | uint64(a[3])<<32 |
					uint64(k.Port)<<16 | uint64(k.Proto)<<8 | uint64(k.Scope)
				if fi, ok = packed[pk]; !ok {
					fi = int32(len(keys))
					packed[pk] = fi
				}
			} else {
				if whole == nil {
					whole = make(map[feIdx]int32, wholeHint)
				}
				w := feIdx{k.Address.As16(), k.Address.Is4(), k.Port, k.Proto, k.Scope}
				if fi, ok = whole[w]; !ok {
					fi = int32(len(keys))
					whole[w] = fi
				}
			}
			if !ok {
				keys, pks, nsl = append(keys, k), append(pks, pk), append(nsl, 0)
				master, hasM = append(master, maps.ServiceValue{}), append(hasM, false)
			}
			if slot == 0 {
				at[j] = -1
				// A repeated key (a hand-made dump) keeps its least value.
				if !hasM[fi] || compareServiceValue(e.Value, master[fi]) < 0 {
					master[fi], hasM[fi] = e.Value, true
				}
				continue
			}
			at[j] = fi
			nsl[fi]++
		}
	}

	// The frontends in key order.
	order := make([]int32, len(keys))
	for i := range order {
		order[i] = int32(i)
	}
	if whole == nil { // every key packed: compare the numbers
		slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(pks[a], pks[b]) })
	} else {
		slices.SortFunc(order, func(a, b int32) int { return compareKey(keys[a], keys[b]) })
	}

	// The groups, in that order, and each frontend's slot range.
	arena := make([]group, len(keys))
	groups := make([]*group, len(keys))
	off := make([]int32, len(keys)) // where frontend i's next slot goes
	n := int32(0)
	for gi, fi := range order {
		g := &arena[gi]
		groups[gi] = g
		k := keys[fi]
		g.key, g.fe = k, FrontendFromKey(k)
		g.hasMaster, g.master = hasM[fi], master[fi]
		g.nslots = int(nsl[fi])
		off[fi] = n
		n += nsl[fi]
	}
	ns, vs := make([]uint16, n), make([]maps.ServiceValue, n)
	for gi, fi := range order {
		start := off[fi]
		groups[gi].slotNs, groups[gi].slotVs = ns[start:start+nsl[fi]:start+nsl[fi]], vs[start:start+nsl[fi]:start+nsl[fi]]
	}
	j = 0
	for chunk := range es.Chunks(buf) {
		for i := range chunk {
			if fi := at[j]; fi >= 0 {
				o := off[fi]
				ns[o], vs[o] = chunk[i].Key.Slot, chunk[i].Value
				off[fi] = o + 1
			}
			j++
		}
	}
	for _, g := range groups {
		g.sortSlots()
	}
	return groups
}

// pairScopes attaches each internal-scope group to the external-scope
// group of the same frontend when that one's master says it has two
// scopes (the internal-scope key is then that service's, whatever its
// entries say); the paired internal groups leave the family's groups before rule 1, and
// rule 5 rewrites them from the rebuilt service (fixInnerScope). Other internal-scope groups stay
// frontends of their own (an internal frontend declared by itself).
func (rb *rebuild) pairScopes() {
	for _, fs := range rb.fam {
		if !slices.ContainsFunc(fs.groups, func(g *group) bool { return g.key.Scope == uint8(lb.ScopeInternal) }) {
			continue // the common case: no map of the external groups to build
		}
		byKey := make(map[maps.ServiceKey]*group, len(fs.groups))
		for _, g := range fs.groups {
			if g.key.Scope == uint8(lb.ScopeExternal) {
				byKey[g.key] = g
			}
		}
		kept := fs.groups[:0]
		for _, g := range fs.groups {
			if g.key.Scope == uint8(lb.ScopeInternal) {
				k := g.key
				k.Scope = uint8(lb.ScopeExternal)
				if e := byKey[k]; e != nil && e.hasMaster && groupHasTwoScopes(e) {
					e.inner = g
					continue
				}
			}
			kept = append(kept, g)
		}
		fs.groups = kept
	}
}

// groupHasTwoScopes reports whether the service g's master describes has two
// backend sets (by its type and policy flags, as rule 5 rebuilds it: the
// TWO_SCOPES bit itself may be wrong).
func groupHasTwoScopes(g *group) bool {
	spec := SpecFromMaster(g.fe, g.master)
	return spec.TwoScopes()
}

// loadMembers indexes the lb_members memberships and summaries by service
// ID, each list sorted by backend ID, and the services' records by service
// ID (rule 5 reads a rebuilt service's weights, node-local flags,
// maintenance backends and source there; rule 8 reconciles them). Entries
// of an unknown kind, and records with a backend ID or an unknown source,
// are left out: rule 8 deletes or rewrites them.
func (rb *rebuild) loadMembers(d Dump) {
	rb.members = make(map[uint16][]maps.MemberEntry)
	rb.sources = make(map[uint16]lb.Source)
	es := slices.Clone(d.Members)
	slices.SortFunc(es, func(a, b maps.MemberEntry) int { return compareMemberKey(a.Key, b.Key) })
	es = slices.CompactFunc(es, func(a, b maps.MemberEntry) bool { return a.Key == b.Key })
	for _, e := range es {
		switch k := e.Key; k.Kind {
		case maps.MemberKindBackend:
			rb.members[k.RevNATIndex] = append(rb.members[k.RevNATIndex], e)
		case maps.MemberKindService:
			if src := lb.Source(e.Value.Source); k.BackendID == 0 && src.IsValid() {
				rb.sources[k.RevNATIndex] = src
			}
		}
	}
}

// Orders. They make Rebuild deterministic: loading keeps the least value of
// a repeated key, and Fixes lists are sorted by them.

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
