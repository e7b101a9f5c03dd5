package table

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// ---- building services and dumps -----------------------------------------

func fe(s string) lb.L3n4Addr {
	a, err := lb.ParseL3n4Addr(s)
	if err != nil {
		panic(err)
	}
	return a
}

type bk struct {
	addr  string
	id    lb.BackendID
	state lb.BackendState
}

func be(addr string, id lb.BackendID, state ...lb.BackendState) bk {
	b := bk{addr: addr, id: id}
	if len(state) > 0 {
		b.state = state[0]
	}
	return b
}

// svc returns a service the way Rebuild gives it back: default weights,
// backends in slot order.
func svc(frontend string, id lb.ServiceID, mod func(*lb.Service), bks ...bk) *Service {
	s := &Service{Spec: lb.Service{Frontend: lb.Frontend{L3n4Addr: fe(frontend), ID: id}}}
	for _, b := range bks {
		x, err := lb.ParseBackend(b.addr)
		if err != nil {
			panic(err)
		}
		x.State = b.state
		s.Spec.Backends = append(s.Spec.Backends, x)
		s.BackendIDs = append(s.BackendIDs, b.id)
	}
	if mod != nil {
		mod(&s.Spec)
	}
	SlotOrder(s.Spec.Backends, s.BackendIDs)
	return s
}

// dumpOf returns the maps the engine writes for svcs.
func dumpOf(svcs ...*Service) Dump {
	var d Dump
	bes := map[maps.Family]map[uint32]maps.BackendEntry{maps.IPv4: {}, maps.IPv6: {}}
	for _, s := range svcs {
		entries := SlotsAndMaster(s)
		d.Members = append(d.Members, MemberEntries(s)...)
		d.AffinityMatch = append(d.AffinityMatch, AffinityMatches(s)...)
		d.SourceRanges = append(d.SourceRanges, SourceRanges(s)...)
		if s.Family() == maps.IPv6 {
			d.Services6 = append(d.Services6, entries...)
			d.RevNAT6 = append(d.RevNAT6, RevNAT(s))
		} else {
			d.Services4 = append(d.Services4, entries...)
			d.RevNAT4 = append(d.RevNAT4, RevNAT(s))
		}
		for _, e := range BackendEntries(s) {
			bes[s.Family()][e.ID] = e
		}
	}
	for _, id := range sortedKeys(bes[maps.IPv4]) {
		d.Backends4 = append(d.Backends4, bes[maps.IPv4][id])
	}
	for _, id := range sortedKeys(bes[maps.IPv6]) {
		d.Backends6 = append(d.Backends6, bes[maps.IPv6][id])
	}
	return d
}

func cloneDump(d Dump) Dump {
	return Dump{
		Services4: slices.Clone(d.Services4), Services6: slices.Clone(d.Services6),
		Backends4: slices.Clone(d.Backends4), Backends6: slices.Clone(d.Backends6),
		RevNAT4: slices.Clone(d.RevNAT4), RevNAT6: slices.Clone(d.RevNAT6),
		Members: slices.Clone(d.Members), AffinityMatch: slices.Clone(d.AffinityMatch),
		SourceRanges: slices.Clone(d.SourceRanges),
	}
}

func shuffle[E any](r *rand.Rand, s []E) {
	r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
}

func shuffledDump(r *rand.Rand, d Dump) Dump {
	c := cloneDump(d)
	shuffle(r, c.Services4)
	shuffle(r, c.Services6)
	shuffle(r, c.Backends4)
	shuffle(r, c.Backends6)
	shuffle(r, c.RevNAT4)
	shuffle(r, c.RevNAT6)
	shuffle(r, c.Members)
	shuffle(r, c.AffinityMatch)
	shuffle(r, c.SourceRanges)
	return c
}

// ---- the maps as Go maps: applying fixes, checking invariants ------------

type famMaps struct {
	svc map[maps.ServiceKey]maps.ServiceValue
	be  map[uint32]maps.BackendValue
	rev map[uint16]maps.RevNATValue
	// lb_members and lb_affinity_match serve both families: st[0] holds them.
	mem   map[maps.MemberKey]maps.MemberValue
	match map[maps.AffinityMatchKey]bool
	// ranges holds both source-range maps (keys name their family).
	ranges map[maps.SourceRangeKey]bool
}

type mapState [2]*famMaps // IPv4, IPv6

func fidx(f maps.Family) int {
	if f == maps.IPv6 {
		return 1
	}
	return 0
}

func stateOf(d Dump) mapState {
	var st mapState
	svcs := [2][]maps.ServiceEntry{d.Services4, d.Services6}
	bes := [2][]maps.BackendEntry{d.Backends4, d.Backends6}
	revs := [2][]maps.RevNATEntry{d.RevNAT4, d.RevNAT6}
	for i := range st {
		fm := &famMaps{svc: map[maps.ServiceKey]maps.ServiceValue{}, be: map[uint32]maps.BackendValue{}, rev: map[uint16]maps.RevNATValue{}}
		for _, e := range svcs[i] {
			fm.svc[e.Key] = e.Value
		}
		for _, e := range bes[i] {
			fm.be[e.ID] = e.Value
		}
		for _, e := range revs[i] {
			fm.rev[e.ID] = e.Value
		}
		st[i] = fm
	}
	st[0].mem, st[0].match = map[maps.MemberKey]maps.MemberValue{}, map[maps.AffinityMatchKey]bool{}
	for _, e := range d.Members {
		st[0].mem[e.Key] = e.Value
	}
	for _, k := range d.AffinityMatch {
		st[0].match[k] = true
	}
	st[0].ranges = map[maps.SourceRangeKey]bool{}
	for _, k := range d.SourceRanges {
		st[0].ranges[k] = true
	}
	return st
}

func (st mapState) dump() Dump {
	var d Dump
	for i, fm := range st {
		var svcs []maps.ServiceEntry
		for k, v := range fm.svc {
			svcs = append(svcs, maps.ServiceEntry{Key: k, Value: v})
		}
		slices.SortFunc(svcs, func(a, b maps.ServiceEntry) int { return compareKey(a.Key, b.Key) })
		var bes []maps.BackendEntry
		for _, id := range sortedKeys(fm.be) {
			bes = append(bes, maps.BackendEntry{ID: id, Value: fm.be[id]})
		}
		var revs []maps.RevNATEntry
		for _, id := range sortedKeys(fm.rev) {
			revs = append(revs, maps.RevNATEntry{ID: id, Value: fm.rev[id]})
		}
		if i == 0 {
			d.Services4, d.Backends4, d.RevNAT4 = svcs, bes, revs
		} else {
			d.Services6, d.Backends6, d.RevNAT6 = svcs, bes, revs
		}
	}
	for k, v := range st[0].mem {
		d.Members = append(d.Members, maps.MemberEntry{Key: k, Value: v})
	}
	slices.SortFunc(d.Members, func(a, b maps.MemberEntry) int { return compareMemberKey(a.Key, b.Key) })
	for k := range st[0].match {
		d.AffinityMatch = append(d.AffinityMatch, k)
	}
	slices.SortFunc(d.AffinityMatch, compareMatchKey)
	for k := range st[0].ranges {
		d.SourceRanges = append(d.SourceRanges, k)
	}
	slices.SortFunc(d.SourceRanges, CompareSourceRangeKey)
	return d
}

// datapathProblems lists what a datapath reading the maps now could trip
// over: a master whose slots 1..count+qcount are not all present, a slot it
// reaches pointing to a missing backend, a master without its revNAT.
func (st mapState) datapathProblems() map[string]bool {
	out := map[string]bool{}
	for i, fm := range st {
		for k, m := range fm.svc {
			if k.Slot != 0 {
				continue
			}
			for s := 1; s <= int(m.Count)+int(m.QCount); s++ {
				sk := k
				sk.Slot = uint16(s)
				v, ok := fm.svc[sk]
				if s > 0xFFFF || !ok {
					out[fmt.Sprintf("%d %s missing", i, sk)] = true
				} else if _, ok := fm.be[v.BackendID]; !ok {
					out[fmt.Sprintf("%d %s dangling", i, sk)] = true
				}
			}
			if _, ok := fm.rev[m.RevNATIndex]; !ok {
				out[fmt.Sprintf("%d %s no revnat", i, k)] = true
			}
			if m.Flags&lb.FlagSourceRange != 0 && !st.hasRanges(families[i], m.RevNATIndex) {
				out[fmt.Sprintf("%d %s source-range flag without ranges", i, k)] = true
			}
		}
	}
	return out
}

// hasRanges reports whether the source-range map of fam holds a range
// of service id.
func (st mapState) hasRanges(fam maps.Family, id uint16) bool {
	for k := range st[0].ranges {
		if k.RevNATIndex == id && k.Family() == fam {
			return true
		}
	}
	return false
}

// apply applies r's fixes to d in the engine's order and checks after every
// step that the datapath finds no problem that was not in the dump already
// (make before break).
func apply(t *testing.T, d Dump, r *Restored) Dump {
	t.Helper()
	st := stateOf(d)
	initial := st.datapathProblems()
	for _, e := range r.Members.MemberWrites {
		st[0].mem[e.Key] = e.Value
	}
	for _, k := range r.Members.MatchWrites {
		st[0].match[k] = true
	}
	for _, k := range r.SourceRanges.Writes {
		st[0].ranges[k] = true
	}
	defer func() {
		for _, k := range r.Members.MemberDeletes {
			delete(st[0].mem, k)
		}
		for _, k := range r.Members.MatchDeletes {
			delete(st[0].match, k)
		}
	}()
	steps := []struct {
		name string
		do   func(fm *famMaps, f *Fixes)
	}{
		{"revnat writes", func(fm *famMaps, f *Fixes) {
			for _, e := range f.RevNATWrites {
				fm.rev[e.ID] = e.Value
			}
		}},
		{"master deletes", func(fm *famMaps, f *Fixes) {
			for _, k := range f.MasterDeletes {
				require.Zero(t, k.Slot, "master delete of a slot")
				delete(fm.svc, k)
			}
		}},
		{"slot writes", func(fm *famMaps, f *Fixes) {
			for _, e := range f.SlotWrites {
				require.NotZero(t, e.Key.Slot, "slot write of a master")
				fm.svc[e.Key] = e.Value
			}
		}},
		{"master writes", func(fm *famMaps, f *Fixes) {
			for _, e := range f.MasterWrites {
				require.Zero(t, e.Key.Slot, "master write of a slot")
				fm.svc[e.Key] = e.Value
			}
		}},
		{"slot deletes", func(fm *famMaps, f *Fixes) {
			for _, k := range f.SlotDeletes {
				require.NotZero(t, k.Slot, "slot delete of a master")
				delete(fm.svc, k)
			}
		}},
		{"backend deletes", func(fm *famMaps, f *Fixes) {
			for _, id := range f.BackendDeletes {
				delete(fm.be, id)
			}
		}},
		{"revnat deletes", func(fm *famMaps, f *Fixes) {
			for _, id := range f.RevNATDeletes {
				delete(fm.rev, id)
			}
		}},
	}
	for _, step := range steps {
		step.do(st[0], &r.Fixes4)
		step.do(st[1], &r.Fixes6)
		for p := range st.datapathProblems() {
			if !initial[p] {
				t.Errorf("after %s: new datapath problem %s", step.name, p)
			}
		}
	}
	for _, k := range r.Members.MemberDeletes {
		delete(st[0].mem, k)
	}
	for _, k := range r.Members.MatchDeletes {
		delete(st[0].match, k)
	}
	for _, k := range r.SourceRanges.Deletes {
		delete(st[0].ranges, k)
	}
	return st.dump()
}

// invariantProblems checks the invariants 1-4 of docs/architecture.md
// (and that the maps hold only what the engine writes) on a dump.
func invariantProblems(d Dump) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	st := stateOf(d)
	ids := map[uint16]string{}
	for i, fm := range st {
		fam := families[i]
		used := map[uint32]bool{}
		for k, m := range fm.svc {
			mk := k
			mk.Slot = 0
			master, ok := fm.svc[mk]
			if !ok {
				bad("%s: slot %s without master", fam, k)
				continue
			}
			if k.Slot == 0 {
				feAddr := FrontendFromKey(k)
				if m.RevNATIndex == 0 || !feAddr.Protocol.IsValid() || !feAddr.Scope.IsValid() {
					bad("%s: invalid master %s %+v", fam, k, m)
				}
				ek := k
				ek.Scope = uint8(lb.ScopeExternal)
				paired := k.Scope == uint8(lb.ScopeInternal) && fm.svc[ek].Flags2&lb.Flag2TwoScopes != 0 && fm.svc[ek].RevNATIndex == m.RevNATIndex
				if other, dup := ids[m.RevNATIndex]; dup && !paired {
					bad("%s: service ID %d of %s also used by %s", fam, m.RevNATIndex, feAddr, other)
				}
				if !paired {
					ids[m.RevNATIndex] = feAddr.String()
				}
				n := int(m.Count) + int(m.QCount)
				var bs []lb.Backend
				for s := 1; s <= n; s++ {
					sk := k
					sk.Slot = uint16(s)
					v, ok := fm.svc[sk]
					if !ok {
						bad("%s: %s: slot %d of %d missing", fam, feAddr, s, n)
						continue
					}
					bv, ok := fm.be[v.BackendID]
					if !ok {
						bad("%s: %s: slot %d points to missing backend %d", fam, feAddr, s, v.BackendID)
						continue
					}
					bs = append(bs, BackendFromValue(bv))
				}
				if len(bs) == n {
					if c, q := Counts(bs); c != m.Count || q != m.QCount {
						bad("%s: %s: count/qcount %d/%d, want %d/%d", fam, feAddr, m.Count, m.QCount, c, q)
					}
					if !slices.IsSortedFunc(bs, func(a, b lb.Backend) int { return stateRank(a.State) - stateRank(b.State) }) {
						bad("%s: %s: slots not in state order", fam, feAddr)
					}
				}
				want := revNATValue(feAddr)
				if v, ok := fm.rev[m.RevNATIndex]; !ok || v != want {
					bad("%s: %s: revNAT %d is %+v (present %v), want %+v", fam, feAddr, m.RevNATIndex, v, ok, want)
				}
				if _, ok := st[1-i].rev[m.RevNATIndex]; ok {
					bad("%s: %s: revNAT %d also in the other family", fam, feAddr, m.RevNATIndex)
				}
				continue
			}
			if int(k.Slot) > int(master.Count)+int(master.QCount) {
				bad("%s: slot %s beyond count", fam, k)
			}
			if m.RevNATIndex != master.RevNATIndex || m.Count != 0 || m.QCount != 0 || m.Flags != 0 || m.Flags2 != 0 {
				bad("%s: slot %s value %+v", fam, k, m)
			}
			if bv, ok := fm.be[m.BackendID]; ok && bv.State == uint8(lb.BackendStateMaintenance) {
				bad("%s: slot %s points to maintenance backend %d", fam, k, m.BackendID)
			}
			used[m.BackendID] = true
		}
		for k := range st[0].mem { // maintenance backends, those left out of a local set
			used[k.BackendID] = true
		}
		keys := map[lb.L3n4Addr]uint32{}
		for _, id := range sortedKeys(fm.be) {
			v := fm.be[id]
			if id == 0 || invalidBackend(fam, maps.BackendEntry{ID: id, Value: v}) != "" {
				bad("%s: invalid backend %d %+v", fam, id, v)
			}
			k := BackendKey(BackendFromValue(v))
			if other, dup := keys[k]; dup {
				bad("%s: backend %s under IDs %d and %d", fam, k, other, id)
			}
			keys[k] = id
			if !used[id] {
				bad("%s: backend %d unreferenced", fam, id)
			}
			if _, ok := st[1-i].be[id]; ok && i == 0 {
				bad("backend ID %d in both families", id)
			}
		}
		if _, ok := fm.rev[0]; ok {
			bad("%s: revNAT with ID 0", fam)
		}
	}
	slices.Sort(out)
	return out
}

// checkOneIDPerBackend checks that every backend the services use has
// one ID in all of them (the backend maps are keyed by ID; the engine's
// backend index takes each restored ID as its backend's slot).
func checkOneIDPerBackend(t *testing.T, r *Restored) {
	t.Helper()
	ids := map[addrkey.Backend]lb.BackendID{}
	for _, s := range r.Services {
		for i, b := range s.Spec.Backends {
			k := addrkey.BackendOf(BackendKey(b))
			if id, seen := ids[k]; seen {
				require.Equal(t, id, s.BackendIDs[i], "backend %s has two IDs", b)
			}
			ids[k] = s.BackendIDs[i]
		}
	}
}

// checkRepaired applies r to d, checks the invariants and that a second
// Rebuild is a no-op with the same table. It returns the repaired dump.
func checkRepaired(t *testing.T, d Dump, r *Restored) Dump {
	t.Helper()
	checkOneIDPerBackend(t, r)
	total := r.Fixes4.Writes() + r.Fixes6.Writes() + r.Members.Writes() + len(r.SourceRanges.Writes) + len(r.SourceRanges.Deletes)
	assert.Equal(t, total > 0, len(r.Repairs) > 0, "fixes without repairs or repairs without fixes: %+v", r.Repairs)
	fixed := apply(t, d, r)
	require.Empty(t, invariantProblems(fixed), "invariants after applying fixes")
	again := Rebuild(fixed)
	assert.Empty(t, again.Repairs, "repairs on the repaired maps")
	assert.True(t, again.Fixes4.Empty(), "v4 fixes on the repaired maps: %+v", again.Fixes4)
	assert.True(t, again.Fixes6.Empty(), "v6 fixes on the repaired maps: %+v", again.Fixes6)
	assert.Equal(t, r.Services, again.Services, "services after repair")
	assert.Empty(t, again.OrphanRevNAT, "orphan revNAT after repair")
	return fixed
}

func checkShuffled(t *testing.T, r *rand.Rand, d Dump, want *Restored) {
	t.Helper()
	for range 3 {
		require.Equal(t, want, Rebuild(shuffledDump(r, d)), "rebuild of shuffled input differs")
	}
}

// ---- consistent dumps ----------------------------------------------------

func consistentServices() []*Service {
	const (
		act  = lb.BackendStateActive
		term = lb.BackendStateTerminating
		quar = lb.BackendStateQuarantined
	)
	np := []bk{be("10.0.3.1:8080/tcp", 301), be("10.0.3.2:8080/tcp", 302, term), be("10.0.3.3:8080/tcp", 303)}
	np6 := []bk{be("[fd00::3:1]:8443/tcp", 601), be("[fd00::3:2]:8443/tcp", 602, quar)}
	return []*Service{
		svc("10.96.0.10:53/udp", 10, nil,
			be("10.0.1.2:53/udp", 102), be("10.0.1.1:53/udp", 101, quar), be("10.0.1.3:53/udp", 103, term), be("10.0.1.4:53/udp", 104, act)),
		svc("0.0.0.0:30080/tcp", 11, func(s *lb.Service) {
			s.Type = lb.SVCTypeNodePort
			s.SessionAffinity, s.SessionAffinityTimeout = true, lb.DefaultSessionAffinityTimeout
			s.LBAlgorithm = lb.LBAlgMaglev
			s.ExtTrafficPolicyLocal = true
			s.Backends[0].NodeLocal = true // two sets: external the local backend, internal all
		}, np...),
		svc("192.168.1.10:30080/tcp", 12, func(s *lb.Service) { s.Type = lb.SVCTypeNodePort }, np...),
		svc("203.0.113.5:443/tcp", 13, func(s *lb.Service) {
			s.Type = lb.SVCTypeLoadBalancer
			s.IntTrafficPolicyLocal = true
			s.LBAlgorithm = lb.LBAlgRandom
			s.Backends[1].NodeLocal = true
			s.Backends[0].Weight = 7
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24")}
		}, be("10.0.4.1:443/tcp", 401), be("10.0.3.1:8080/tcp", 301)),
		svc("203.0.113.5:444/tcp/internal", 14, func(s *lb.Service) { s.Type = lb.SVCTypeLoadBalancer },
			be("10.0.4.2:443/tcp", 402)),
		svc("198.51.100.7:8080/sctp", 15, func(s *lb.Service) { s.Type = lb.SVCTypeExternalIPs },
			be("10.0.5.1:8080/sctp", 501)),
		svc("10.0.0.5:8081/tcp", 16, func(s *lb.Service) { s.Type = lb.SVCTypeHostPort },
			be("10.0.6.1:8081/tcp", 611, term), be("10.0.6.2:8081/tcp", 612, term), be("10.0.6.3:8081/tcp", 613, quar)),
		svc("169.254.20.10:53/any", 17, func(s *lb.Service) { s.Type = lb.SVCTypeLocalRedirect },
			be("10.0.7.1:53/udp", 701, quar), be("10.0.7.1:53/tcp", 702, quar)),
		svc("10.96.0.99:80/tcp", 18, nil),
		svc("10.96.0.98:80/tcp", 19, func(s *lb.Service) { s.Backends[1].Weight = 0 },
			be("10.0.8.1:80/tcp", 801), be("10.0.8.2:80/tcp", 802), be("10.0.8.3:80/tcp", 803, lb.BackendStateMaintenance)),
		svc("[fd00::a]:443/tcp", 20, func(s *lb.Service) { s.SessionAffinity, s.SessionAffinityTimeout = true, 300 },
			be("[fd00::1:2]:443/tcp", 202), be("[fd00::1:1]:443/tcp", 201, term)),
		svc("[::]:30443/tcp", 21, func(s *lb.Service) { s.Type = lb.SVCTypeNodePort }, np6...),
		svc("[2001:db8::1]:30443/tcp", 22, func(s *lb.Service) {
			s.Type = lb.SVCTypeLoadBalancer
			s.LBAlgorithm = lb.LBAlgMaglev
			s.ExtTrafficPolicyLocal, s.IntTrafficPolicyLocal = true, true
			s.Backends[0].NodeLocal = true
			s.SourceRanges, s.SourceRangesDeny = []netip.Prefix{netip.MustParsePrefix("2001:db8:bad::/48")}, true
		}, np6...),
		svc("[fd00::b]:53/udp/internal", 23, func(s *lb.Service) { s.Type = lb.SVCTypeClusterIP },
			be("[fd00::7:1]:53/udp", 711, quar)),
	}
}

func TestRebuildConsistent(t *testing.T) {
	r := testutil.Rand(t)
	orig := consistentServices()
	d := dumpOf(orig...)
	got := Rebuild(d)
	assert.Empty(t, got.Repairs)
	assert.True(t, got.Fixes4.Empty(), "%+v", got.Fixes4)
	assert.True(t, got.Fixes6.Empty(), "%+v", got.Fixes6)
	assert.Zero(t, got.Fixes(maps.IPv4).Writes()+got.Fixes(maps.IPv6).Writes())
	assert.Empty(t, got.OrphanRevNAT)
	want := slices.Clone(orig)
	slices.SortFunc(want, func(a, b *Service) int { return int(a.ID()) - int(b.ID()) })
	require.Equal(t, want, got.Services)
	for _, s := range got.Services {
		assert.Len(t, s.BackendIDs, len(s.Spec.Backends))
	}
	assert.Empty(t, invariantProblems(d))
	checkOneIDPerBackend(t, got)
	checkShuffled(t, r, d, got)
}

func TestRebuildEmpty(t *testing.T) {
	got := Rebuild(Dump{})
	assert.Equal(t, &Restored{}, got)
}

// ---- one case per repair -------------------------------------------------

// The base dump of the repair cases.
var (
	fe1 = "10.96.0.10:53/udp"
	fe2 = "10.96.0.20:80/tcp"
	fe3 = "[fd00::a]:443/tcp"
	feB = "[fd00::b]:80/tcp"
)

func baseServices() []*Service {
	return []*Service{
		svc(fe1, 1, nil, be("10.0.1.1:53/udp", 11), be("10.0.1.2:53/udp", 12), be("10.0.1.3:53/udp", 13, lb.BackendStateTerminating)),
		svc(fe2, 2, nil, be("10.0.2.1:80/tcp", 21), be("10.0.2.2:80/tcp", 22, lb.BackendStateQuarantined)),
		svc(fe3, 3, nil, be("[fd00::1:1]:8443/tcp", 31), be("[fd00::1:2]:8443/tcp", 32)),
	}
}

func k(frontend string, slot uint16) maps.ServiceKey { return Key(fe(frontend), slot) }

func kp(frontend string, slot uint16, proto, scope uint8) maps.ServiceKey {
	key := k(frontend, slot)
	key.Proto, key.Scope = proto, scope
	return key
}

func slotE(frontend string, slot uint16, backend uint32, id uint16) maps.ServiceEntry {
	return maps.ServiceEntry{Key: k(frontend, slot), Value: maps.ServiceValue{BackendID: backend, RevNATIndex: id}}
}

func masterE(frontend string, count, qcount, id uint16) maps.ServiceEntry {
	return maps.ServiceEntry{Key: k(frontend, 0), Value: maps.ServiceValue{Count: count, QCount: qcount, RevNATIndex: id, Flags: lb.FlagRoutable}}
}

func rev(id uint16, addrPort string) maps.RevNATEntry {
	ap := netip.MustParseAddrPort(addrPort)
	return maps.RevNATEntry{ID: id, Value: maps.RevNATValue{Address: ap.Addr(), Port: ap.Port()}}
}

func bval(addrPort string, proto lb.L4Type, state lb.BackendState) maps.BackendValue {
	ap := netip.MustParseAddrPort(addrPort)
	return maps.BackendValue{Address: ap.Addr(), Port: ap.Port(), Proto: uint8(proto), State: uint8(state)}
}

func rep(kind RepairKind, fam maps.Family, sid lb.ServiceID, frontend string, bid lb.BackendID, detail string) Repair {
	r := Repair{Kind: kind, Family: fam, ServiceID: sid, BackendID: bid, Detail: detail}
	if frontend != "" {
		r.Frontend = fe(frontend).String()
	}
	return r
}

func orphanRep(fam maps.Family, id lb.BackendID, desc string) Repair {
	return Repair{Kind: RepairOrphanBackend, Family: fam, BackendID: id,
		Detail: fmt.Sprintf("backend %d (%s) referenced by no slot: deleted", id, desc)}
}

func atKey(key maps.ServiceKey) func(maps.ServiceEntry) bool {
	return func(e maps.ServiceEntry) bool { return e.Key == key }
}

func editSvc(s []maps.ServiceEntry, key maps.ServiceKey, f func(*maps.ServiceValue)) {
	i := slices.IndexFunc(s, atKey(key))
	if i < 0 {
		panic("no entry " + key.String())
	}
	f(&s[i].Value)
}

func editBackend(s []maps.BackendEntry, id uint32, f func(*maps.BackendValue)) {
	i := slices.IndexFunc(s, func(e maps.BackendEntry) bool { return e.ID == id })
	if i < 0 {
		panic(fmt.Sprint("no backend ", id))
	}
	f(&s[i].Value)
}

func backendOf(s []maps.BackendEntry, id uint32) maps.BackendValue {
	i := slices.IndexFunc(s, func(e maps.BackendEntry) bool { return e.ID == id })
	return s[i].Value
}

func setBackendID(id uint32) func(*maps.ServiceValue) {
	return func(v *maps.ServiceValue) { v.BackendID = id }
}

// rekey changes protocol and scope of every entry of a frontend.
func rekey(s []maps.ServiceEntry, frontend string, proto, scope uint8) {
	for i := range s {
		key := s[i].Key
		key.Slot = 0
		if key == k(frontend, 0) {
			s[i].Key.Proto, s[i].Key.Scope = proto, scope
		}
	}
}

type restoreCase struct {
	name    string
	corrupt func(d *Dump)
	fixes4  Fixes
	fixes6  Fixes
	repairs []Repair
	orphans []maps.RevNATEntry
	// services: every service after restore, with its backend IDs; nil
	// means the three base services unchanged.
	services map[lb.ServiceID][]lb.BackendID
}

var baseBackends = map[lb.ServiceID][]lb.BackendID{1: {11, 12, 13}, 2: {21, 22}, 3: {31, 32}}

func withBackends(id lb.ServiceID, ids ...lb.BackendID) map[lb.ServiceID][]lb.BackendID {
	m := map[lb.ServiceID][]lb.BackendID{}
	for sid, bids := range baseBackends {
		m[sid] = bids
	}
	if ids == nil {
		delete(m, id)
	} else {
		m[id] = ids
	}
	return m
}

func restoreCases() []restoreCase {
	const v4, v6 = maps.IPv4, maps.IPv6
	svcB := svc(feB, 1, nil, be("[fd00::2:1]:80/tcp", 41))
	return []restoreCase{
		// Rule 1: slots without master: deleted, and its backends and revNAT left to rules 6 and 7.
		{
			name:    "rule 1: slots without master",
			corrupt: func(d *Dump) { d.Services4 = slices.DeleteFunc(d.Services4, atKey(k(fe2, 0))) },
			fixes4: Fixes{
				SlotDeletes:    []maps.ServiceKey{k(fe2, 1), k(fe2, 2)},
				BackendDeletes: []uint32{21, 22},
				RevNATDeletes:  []uint16{2},
			},
			repairs: []Repair{
				orphanRep(v4, 21, "10.0.2.1:80/TCP, active"),
				orphanRep(v4, 22, "10.0.2.2:80/TCP, quarantined"),
				rep(RepairOrphanRevNAT, v4, 2, "", 0, "revNAT entry 10.96.0.20:80 of no service: deleted"),
				rep(RepairSlotsWithoutMaster, v4, 0, fe2, 0, "slots 1-2 without master: deleted"),
			},
			orphans:  []maps.RevNATEntry{rev(2, "10.96.0.20:80")},
			services: withBackends(2),
		},
		// Rule 2: invalid frontends are removed.
		{
			name:    "rule 2: invalid entry: master with rev_nat_index 0",
			corrupt: func(d *Dump) { editSvc(d.Services4, k(fe2, 0), func(v *maps.ServiceValue) { v.RevNATIndex = 0 }) },
			fixes4: Fixes{
				MasterDeletes:  []maps.ServiceKey{k(fe2, 0)},
				SlotDeletes:    []maps.ServiceKey{k(fe2, 1), k(fe2, 2)},
				BackendDeletes: []uint32{21, 22},
				RevNATDeletes:  []uint16{2},
			},
			repairs: []Repair{
				rep(RepairInvalidEntry, v4, 0, fe2, 0, "master has rev_nat_index 0: service removed"),
				orphanRep(v4, 21, "10.0.2.1:80/TCP, active"),
				orphanRep(v4, 22, "10.0.2.2:80/TCP, quarantined"),
				rep(RepairOrphanRevNAT, v4, 2, "", 0, "revNAT entry 10.96.0.20:80 of no service: deleted"),
			},
			orphans:  []maps.RevNATEntry{rev(2, "10.96.0.20:80")},
			services: withBackends(2),
		},
		{
			name:    "rule 2: invalid entry: unknown protocol, its revNAT deleted",
			corrupt: func(d *Dump) { rekey(d.Services4, fe2, 99, 0) },
			fixes4: Fixes{
				MasterDeletes:  []maps.ServiceKey{kp(fe2, 0, 99, 0)},
				SlotDeletes:    []maps.ServiceKey{kp(fe2, 1, 99, 0), kp(fe2, 2, 99, 0)},
				BackendDeletes: []uint32{21, 22},
				RevNATDeletes:  []uint16{2},
			},
			repairs: []Repair{
				{Kind: RepairInvalidEntry, Family: v4, ServiceID: 2, Frontend: "10.96.0.20:80/L4Type(99)", Detail: "master has unknown protocol 99: service removed"},
				{Kind: RepairInvalidEntry, Family: v4, ServiceID: 2, Frontend: "10.96.0.20:80/L4Type(99)", Detail: "revNAT entry of the removed frontend: deleted"},
				orphanRep(v4, 21, "10.0.2.1:80/TCP, active"),
				orphanRep(v4, 22, "10.0.2.2:80/TCP, quarantined"),
			},
			services: withBackends(2),
		},
		{
			name: "rule 2: invalid entry: unknown scope, revNAT kept for a service with the ID",
			corrupt: func(d *Dump) {
				rekey(d.Services6, fe3, uint8(lb.TCP), 3)
				// A valid twin with the same ID and address (scope internal)
				// keeps ID 3 and its revNAT.
				twin := svc("[fd00::a]:443/tcp/internal", 3, nil, be("[fd00::1:1]:8443/tcp", 31))
				d.Services6 = append(d.Services6, dumpOf(twin).Services6...)
			},
			fixes6: Fixes{
				MasterDeletes:  []maps.ServiceKey{kp(fe3, 0, 6, 3)},
				SlotDeletes:    []maps.ServiceKey{kp(fe3, 1, 6, 3), kp(fe3, 2, 6, 3)},
				BackendDeletes: []uint32{32},
			},
			repairs: []Repair{
				{Kind: RepairInvalidEntry, Family: v6, ServiceID: 3, Frontend: "[fd00::a]:443/TCP/Scope(3)", Detail: "master has unknown scope 3: service removed"},
				orphanRep(v6, 32, "[fd00::1:2]:8443/TCP, active"),
			},
			services: withBackends(3, 31),
		},
		{
			name: "rule 2: invalid entry: frontend address of the wrong family",
			corrupt: func(d *Dump) {
				// fe2's master and slots move to the IPv6 map.
				for _, e := range d.Services4 {
					if e.Key.Address == fe(fe2).Addr {
						d.Services6 = append(d.Services6, e)
					}
				}
				d.Services4 = slices.DeleteFunc(d.Services4, func(e maps.ServiceEntry) bool { return e.Key.Address == fe(fe2).Addr })
			},
			fixes4: Fixes{
				BackendDeletes: []uint32{21, 22},
				RevNATDeletes:  []uint16{2},
			},
			fixes6: Fixes{
				MasterDeletes: []maps.ServiceKey{k(fe2, 0)},
				SlotDeletes:   []maps.ServiceKey{k(fe2, 1), k(fe2, 2)},
			},
			repairs: []Repair{
				rep(RepairInvalidEntry, v6, 2, fe2, 0, "frontend address 10.96.0.20 of the wrong family: service removed"),
				orphanRep(v4, 21, "10.0.2.1:80/TCP, active"),
				orphanRep(v4, 22, "10.0.2.2:80/TCP, quarantined"),
				// Rule 7 looks for a removed owner in the entry's own family
				// only: the IPv4 entry of the frontend removed from the IPv6
				// map is an orphan.
				rep(RepairOrphanRevNAT, v4, 2, "", 0, "revNAT entry 10.96.0.20:80 of no service: deleted"),
			},
			orphans:  []maps.RevNATEntry{rev(2, "10.96.0.20:80")},
			services: withBackends(2),
		},
		// Rule 3: one frontend per service ID.
		{
			name: "rule 3: duplicate service ID: both revNATs match, lowest frontend kept",
			corrupt: func(d *Dump) {
				b := dumpOf(svcB)
				d.Services6 = append(d.Services6, b.Services6...)
				d.Backends6 = append(d.Backends6, b.Backends6...)
				d.RevNAT6 = append(d.RevNAT6, b.RevNAT6...)
			},
			fixes6: Fixes{
				MasterDeletes:  []maps.ServiceKey{k(feB, 0)},
				SlotDeletes:    []maps.ServiceKey{k(feB, 1)},
				BackendDeletes: []uint32{41},
				RevNATDeletes:  []uint16{1},
			},
			repairs: []Repair{
				rep(RepairDuplicateServiceID, v6, 1, feB, 0, "service ID 1 also used by 10.96.0.10:53/UDP, which is kept: service removed"),
				orphanRep(v6, 41, "[fd00::2:1]:80/TCP, active"),
				rep(RepairWrongRevNAT, v6, 1, fe1, 0, "revNAT entry in the ipv6 map for a service of the ipv4 map: deleted"),
			},
		},
		{
			name: "rule 3: duplicate service ID: the frontend matching its revNAT kept",
			corrupt: func(d *Dump) {
				b := dumpOf(svcB)
				d.Services6 = append(d.Services6, b.Services6...)
				d.Backends6 = append(d.Backends6, b.Backends6...)
				d.RevNAT6 = append(d.RevNAT6, b.RevNAT6...)
				d.RevNAT4[slices.IndexFunc(d.RevNAT4, func(e maps.RevNATEntry) bool { return e.ID == 1 })] = rev(1, "10.96.0.99:53")
			},
			fixes4: Fixes{
				MasterDeletes:  []maps.ServiceKey{k(fe1, 0)},
				SlotDeletes:    []maps.ServiceKey{k(fe1, 1), k(fe1, 2), k(fe1, 3)},
				BackendDeletes: []uint32{11, 12, 13},
				RevNATDeletes:  []uint16{1},
			},
			repairs: []Repair{
				rep(RepairDuplicateServiceID, v4, 1, fe1, 0, "service ID 1 also used by [fd00::b]:80/TCP, which is kept: service removed"),
				orphanRep(v4, 11, "10.0.1.1:53/UDP, active"),
				orphanRep(v4, 12, "10.0.1.2:53/UDP, active"),
				orphanRep(v4, 13, "10.0.1.3:53/UDP, terminating"),
				rep(RepairWrongRevNAT, v4, 1, feB, 0, "revNAT entry in the ipv4 map for a service of the ipv6 map: deleted"),
			},
			services: withBackends(1, 41),
		},
		// Rule 4: valid, unique backends (rule 5 then drops or rewrites the slots naming them).
		{
			name: "rule 4: invalid entry: backend with unknown state",
			corrupt: func(d *Dump) {
				editBackend(d.Backends4, 22, func(v *maps.BackendValue) { v.State = 9 })
			},
			fixes4: Fixes{
				MasterWrites:   []maps.ServiceEntry{masterE(fe2, 1, 0, 2)},
				SlotDeletes:    []maps.ServiceKey{k(fe2, 2)},
				BackendDeletes: []uint32{22},
			},
			repairs: []Repair{
				rep(RepairDanglingSlot, v4, 2, fe2, 22, "slot 2 points to missing backend 22: dropped"),
				rep(RepairInvalidEntry, v4, 0, "", 22, "backend 22 has unknown state 9: deleted"),
			},
			services: withBackends(2, 21),
		},
		{
			name: "rule 4: invalid entry: backend with unknown protocol, backend ID 0",
			corrupt: func(d *Dump) {
				d.Backends4 = append(d.Backends4,
					maps.BackendEntry{ID: 0, Value: bval("10.0.9.9:80", lb.TCP, lb.BackendStateActive)},
					maps.BackendEntry{ID: 51, Value: bval("10.0.9.9:80", 99, lb.BackendStateActive)})
			},
			fixes4: Fixes{BackendDeletes: []uint32{0, 51}},
			repairs: []Repair{
				rep(RepairInvalidEntry, v4, 0, "", 0, "backend 0 has the invalid ID 0: deleted"),
				rep(RepairInvalidEntry, v4, 0, "", 51, "backend 51 has unknown protocol 99: deleted"),
			},
		},
		{
			name: "rule 4: invalid entry: backend address of the wrong family",
			corrupt: func(d *Dump) {
				d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 60, Value: bval("[fd00::9]:80", lb.TCP, lb.BackendStateActive)})
			},
			fixes4:  Fixes{BackendDeletes: []uint32{60}},
			repairs: []Repair{rep(RepairInvalidEntry, v4, 0, "", 60, "backend 60 has address fd00::9 of the wrong family: deleted")},
		},
		{
			name: "rule 4: invalid entry: backend ID in both families",
			corrupt: func(d *Dump) {
				d.Backends6 = append(d.Backends6, maps.BackendEntry{ID: 11, Value: bval("[fd00::9]:80", lb.TCP, lb.BackendStateActive)})
			},
			fixes6:  Fixes{BackendDeletes: []uint32{11}},
			repairs: []Repair{rep(RepairInvalidEntry, v6, 0, "", 11, "backend 11 is also in the ipv4 backend map: deleted here")},
		},
		{
			name: "rule 4: duplicate backend",
			corrupt: func(d *Dump) {
				d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 14, Value: backendOf(d.Backends4, 11)})
				editSvc(d.Services4, k(fe1, 1), setBackendID(14))
			},
			fixes4: Fixes{
				SlotWrites:     []maps.ServiceEntry{slotE(fe1, 1, 11, 1)},
				BackendDeletes: []uint32{14},
			},
			repairs: []Repair{
				rep(RepairDuplicateBackend, v4, 0, "", 14, "backend 14 duplicates backend 11 (10.0.1.1:53/UDP): deleted"),
				rep(RepairDuplicateBackend, v4, 1, fe1, 14, "slot 1 points to duplicate backend 14: rewritten to 11"),
			},
		},
		{
			name: "rule 4: duplicate backend: the service then has it twice",
			corrupt: func(d *Dump) {
				d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 14, Value: backendOf(d.Backends4, 12)})
				editSvc(d.Services4, k(fe1, 1), setBackendID(14))
			},
			fixes4: Fixes{
				SlotWrites:     []maps.ServiceEntry{slotE(fe1, 1, 12, 1), slotE(fe1, 2, 13, 1)},
				MasterWrites:   []maps.ServiceEntry{masterE(fe1, 1, 1, 1)},
				SlotDeletes:    []maps.ServiceKey{k(fe1, 3)},
				BackendDeletes: []uint32{11, 14},
			},
			repairs: []Repair{
				rep(RepairDuplicateBackend, v4, 0, "", 14, "backend 14 duplicates backend 12 (10.0.1.2:53/UDP): deleted"),
				rep(RepairDuplicateBackend, v4, 1, fe1, 12, "slot 2 points to backend 12, already in slot 1 (rewritten from 14): dropped"),
				rep(RepairDuplicateBackend, v4, 1, fe1, 14, "slot 1 points to duplicate backend 14: rewritten to 12"),
				orphanRep(v4, 11, "10.0.1.1:53/UDP, active"),
			},
			services: withBackends(1, 12, 13),
		},
		// Rule 5: each kept service rebuilt from its slots.
		{
			name:    "rule 5: missing slot",
			corrupt: func(d *Dump) { d.Services4 = slices.DeleteFunc(d.Services4, atKey(k(fe1, 2))) },
			fixes4: Fixes{
				SlotWrites:     []maps.ServiceEntry{slotE(fe1, 2, 13, 1)},
				MasterWrites:   []maps.ServiceEntry{masterE(fe1, 1, 1, 1)},
				SlotDeletes:    []maps.ServiceKey{k(fe1, 3)},
				BackendDeletes: []uint32{12},
			},
			repairs: []Repair{
				rep(RepairMissingSlot, v4, 1, fe1, 0, "slot 2 of count+qcount 3 missing: dropped"),
				orphanRep(v4, 12, "10.0.1.2:53/UDP, active"),
			},
			services: withBackends(1, 11, 13),
		},
		{
			name:    "rule 5: extra slot",
			corrupt: func(d *Dump) { d.Services4 = append(d.Services4, slotE(fe1, 4, 21, 1), slotE(fe1, 6, 21, 1)) },
			fixes4:  Fixes{SlotDeletes: []maps.ServiceKey{k(fe1, 4), k(fe1, 6)}},
			repairs: []Repair{rep(RepairExtraSlot, v4, 1, fe1, 0, "slots 4, 6 beyond count+qcount 3: deleted")},
		},
		{
			name:    "rule 5: dangling slot",
			corrupt: func(d *Dump) { editSvc(d.Services4, k(fe1, 1), setBackendID(99)) },
			fixes4: Fixes{
				SlotWrites:     []maps.ServiceEntry{slotE(fe1, 1, 12, 1), slotE(fe1, 2, 13, 1)},
				MasterWrites:   []maps.ServiceEntry{masterE(fe1, 1, 1, 1)},
				SlotDeletes:    []maps.ServiceKey{k(fe1, 3)},
				BackendDeletes: []uint32{11},
			},
			repairs: []Repair{
				rep(RepairDanglingSlot, v4, 1, fe1, 99, "slot 1 points to missing backend 99: dropped"),
				orphanRep(v4, 11, "10.0.1.1:53/UDP, active"),
			},
			services: withBackends(1, 12, 13),
		},
		{
			name: "rule 5: dangling slot: backend in maintenance",
			corrupt: func(d *Dump) {
				editBackend(d.Backends4, 12, func(v *maps.BackendValue) { v.State = uint8(lb.BackendStateMaintenance) })
			},
			fixes4: Fixes{
				SlotWrites:     []maps.ServiceEntry{slotE(fe1, 2, 13, 1)},
				MasterWrites:   []maps.ServiceEntry{masterE(fe1, 1, 1, 1)},
				SlotDeletes:    []maps.ServiceKey{k(fe1, 3)},
				BackendDeletes: []uint32{12},
			},
			repairs: []Repair{
				rep(RepairDanglingSlot, v4, 1, fe1, 12, "slot 2 points to backend 12 in maintenance: dropped"),
				orphanRep(v4, 12, "10.0.1.2:53/UDP, maintenance"),
			},
			services: withBackends(1, 11, 13),
		},
		{
			name: "rule 5: dangling slot: backend ID 0",
			corrupt: func(d *Dump) {
				editSvc(d.Services4, k(fe2, 2), setBackendID(0))
			},
			fixes4: Fixes{
				MasterWrites:   []maps.ServiceEntry{masterE(fe2, 1, 0, 2)},
				SlotDeletes:    []maps.ServiceKey{k(fe2, 2)},
				BackendDeletes: []uint32{22},
			},
			repairs: []Repair{
				rep(RepairDanglingSlot, v4, 2, fe2, 0, "slot 2 points to missing backend 0: dropped"),
				orphanRep(v4, 22, "10.0.2.2:80/TCP, quarantined"),
			},
			services: withBackends(2, 21),
		},
		{
			name: "rule 5: duplicate backend: a later slot names the duplicate of an earlier slot's backend",
			corrupt: func(d *Dump) {
				d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 14, Value: backendOf(d.Backends4, 11)})
				editSvc(d.Services4, k(fe1, 2), setBackendID(14))
			},
			fixes4: Fixes{
				SlotWrites:     []maps.ServiceEntry{slotE(fe1, 2, 13, 1)},
				MasterWrites:   []maps.ServiceEntry{masterE(fe1, 1, 1, 1)},
				SlotDeletes:    []maps.ServiceKey{k(fe1, 3)},
				BackendDeletes: []uint32{12, 14},
			},
			repairs: []Repair{
				rep(RepairDuplicateBackend, v4, 0, "", 14, "backend 14 duplicates backend 11 (10.0.1.1:53/UDP): deleted"),
				rep(RepairDuplicateBackend, v4, 1, fe1, 14, "slot 2 points to duplicate backend 14 of backend 11, already in slot 1: dropped"),
				orphanRep(v4, 12, "10.0.1.2:53/UDP, active"),
			},
			services: withBackends(1, 11, 13),
		},
		{
			name:    "rule 5: invalid entry: slot with another rev_nat_index",
			corrupt: func(d *Dump) { editSvc(d.Services4, k(fe1, 1), func(v *maps.ServiceValue) { v.RevNATIndex = 9 }) },
			fixes4:  Fixes{SlotWrites: []maps.ServiceEntry{slotE(fe1, 1, 11, 1)}},
			repairs: []Repair{rep(RepairInvalidEntry, v4, 1, fe1, 11, "slot 1 has rev_nat_index 9, want 1: rewritten")},
		},
		{
			name:    "rule 5: invalid entry: slot with stray flags",
			corrupt: func(d *Dump) { editSvc(d.Services6, k(fe3, 2), func(v *maps.ServiceValue) { v.Flags = 3 }) },
			fixes6:  Fixes{SlotWrites: []maps.ServiceEntry{slotE(fe3, 2, 32, 3)}},
			repairs: []Repair{rep(RepairInvalidEntry, v6, 3, fe3, 32, "slot 2 has stray count, qcount or flags: rewritten")},
		},
		{
			name: "rule 5: invalid entry: slot repeats a backend",
			corrupt: func(d *Dump) {
				editSvc(d.Services4, k(fe1, 2), setBackendID(11))
			},
			fixes4: Fixes{
				SlotWrites:     []maps.ServiceEntry{slotE(fe1, 2, 13, 1)},
				MasterWrites:   []maps.ServiceEntry{masterE(fe1, 1, 1, 1)},
				SlotDeletes:    []maps.ServiceKey{k(fe1, 3)},
				BackendDeletes: []uint32{12},
			},
			repairs: []Repair{
				rep(RepairInvalidEntry, v4, 1, fe1, 11, "slot 2 repeats backend 11 of slot 1: dropped"),
				orphanRep(v4, 12, "10.0.1.2:53/UDP, active"),
			},
			services: withBackends(1, 11, 13),
		},
		{
			name: "rule 5: invalid entry: master flags and algorithm",
			corrupt: func(d *Dump) {
				editSvc(d.Services4, k(fe1, 0), func(v *maps.ServiceValue) {
					v.Flags2 |= lb.Flag2NAT46x64
					v.BackendID = 7 << 24
				})
			},
			fixes4:  Fixes{MasterWrites: []maps.ServiceEntry{masterE(fe1, 2, 1, 1)}},
			repairs: []Repair{rep(RepairInvalidEntry, v4, 1, fe1, 0, "master value not as the engine writes it (affinity/algorithm 0x7000000 -> 0x0, flags2 0x02 -> 0x00): rewritten")},
		},
		{
			name: "rule 5: slot order: states out of order",
			corrupt: func(d *Dump) {
				editSvc(d.Services4, k(fe1, 2), setBackendID(13))
				editSvc(d.Services4, k(fe1, 3), setBackendID(12))
			},
			fixes4:  Fixes{SlotWrites: []maps.ServiceEntry{slotE(fe1, 2, 12, 1), slotE(fe1, 3, 13, 1)}},
			repairs: []Repair{rep(RepairSlotOrder, v4, 1, fe1, 0, "slots not in state order (active, terminating, quarantined): reordered")},
		},
		{
			name: "rule 5: slot order: count and qcount wrong for the states",
			corrupt: func(d *Dump) {
				editSvc(d.Services4, k(fe1, 0), func(v *maps.ServiceValue) { v.Count, v.QCount = 3, 0 })
			},
			fixes4:  Fixes{MasterWrites: []maps.ServiceEntry{masterE(fe1, 2, 1, 1)}},
			repairs: []Repair{rep(RepairSlotOrder, v4, 1, fe1, 0, "count/qcount 3/0 wrong for the slot states: now 2/1")},
		},
		// Rule 6: orphan backends.
		{
			name: "rule 6: orphan backend",
			corrupt: func(d *Dump) {
				d.Backends4 = append(d.Backends4, maps.BackendEntry{ID: 50, Value: bval("10.0.9.9:80", lb.TCP, lb.BackendStateActive)})
			},
			fixes4:  Fixes{BackendDeletes: []uint32{50}},
			repairs: []Repair{orphanRep(v4, 50, "10.0.9.9:80/TCP, active")},
		},
		// Rule 7: revNAT entries follow the services.
		{
			name: "rule 7: missing revNAT",
			corrupt: func(d *Dump) {
				d.RevNAT4 = slices.DeleteFunc(d.RevNAT4, func(e maps.RevNATEntry) bool { return e.ID == 2 })
			},
			fixes4:  Fixes{RevNATWrites: []maps.RevNATEntry{rev(2, "10.96.0.20:80")}},
			repairs: []Repair{rep(RepairMissingRevNAT, v4, 2, fe2, 0, "no revNAT entry: written")},
		},
		{
			name: "rule 7: wrong revNAT",
			corrupt: func(d *Dump) {
				d.RevNAT4[slices.IndexFunc(d.RevNAT4, func(e maps.RevNATEntry) bool { return e.ID == 2 })] = rev(2, "10.96.0.99:80")
			},
			fixes4:  Fixes{RevNATWrites: []maps.RevNATEntry{rev(2, "10.96.0.20:80")}},
			repairs: []Repair{rep(RepairWrongRevNAT, v4, 2, fe2, 0, "revNAT entry points to 10.96.0.99:80, want 10.96.0.20:80: rewritten")},
		},
		{
			name:    "rule 7: wrong revNAT: in the other family",
			corrupt: func(d *Dump) { d.RevNAT6 = append(d.RevNAT6, rev(2, "[fd00::99]:80")) },
			fixes6:  Fixes{RevNATDeletes: []uint16{2}},
			repairs: []Repair{rep(RepairWrongRevNAT, v6, 2, fe2, 0, "revNAT entry in the ipv6 map for a service of the ipv4 map: deleted")},
		},
		{
			name:    "rule 7: invalid entry: revNAT with ID 0",
			corrupt: func(d *Dump) { d.RevNAT4 = append(d.RevNAT4, rev(0, "10.96.0.99:80")) },
			fixes4:  Fixes{RevNATDeletes: []uint16{0}},
			repairs: []Repair{rep(RepairInvalidEntry, v4, 0, "", 0, "revNAT entry with the invalid ID 0 (10.96.0.99:80): deleted")},
		},
		{
			name:    "rule 7: orphan revNAT deleted",
			corrupt: func(d *Dump) { d.RevNAT6 = append(d.RevNAT6, rev(9, "[fd00::99]:80")) },
			fixes6:  Fixes{RevNATDeletes: []uint16{9}},
			repairs: []Repair{rep(RepairOrphanRevNAT, v6, 9, "", 0, "revNAT entry [fd00::99]:80 of no service: deleted")},
			orphans: []maps.RevNATEntry{rev(9, "[fd00::99]:80")},
		},
	}
}

func TestRebuildRepairs(t *testing.T) {
	r := testutil.Rand(t)
	for _, tc := range restoreCases() {
		t.Run(tc.name, func(t *testing.T) {
			d := dumpOf(baseServices()...)
			tc.corrupt(&d)
			got := Rebuild(d)

			assert.Equal(t, tc.fixes4, got.Fixes4, "fixes4")
			assert.Equal(t, tc.fixes6, got.Fixes6, "fixes6")
			assert.Equal(t, tc.repairs, got.Repairs, "repairs")
			assert.Equal(t, tc.orphans, got.OrphanRevNAT, "orphan revNAT")
			want := tc.services
			if want == nil {
				want = baseBackends
			}
			gotIDs := map[lb.ServiceID][]lb.BackendID{}
			for _, s := range got.Services {
				gotIDs[s.ID()] = s.BackendIDs
				assert.Len(t, s.Spec.Backends, len(s.BackendIDs))
			}
			assert.Equal(t, want, gotIDs, "services and their backend IDs")
			assert.True(t, slices.IsSortedFunc(got.Services, func(a, b *Service) int { return int(a.ID()) - int(b.ID()) }))

			checkShuffled(t, r, d, got)
			checkRepaired(t, d, got)
		})
	}
}

func TestRepairKindStrings(t *testing.T) {
	kinds := []RepairKind{RepairSlotsWithoutMaster, RepairMissingSlot, RepairExtraSlot, RepairDanglingSlot,
		RepairDuplicateServiceID, RepairMissingRevNAT, RepairWrongRevNAT, RepairDuplicateBackend,
		RepairOrphanBackend, RepairOrphanRevNAT, RepairInvalidEntry, RepairSlotOrder}
	seen := map[string]bool{}
	for _, k := range kinds {
		assert.Regexp(t, `^[a-z]+(-[a-z]+)*$`, k.String())
		assert.False(t, seen[k.String()], "duplicate kind %s", k)
		seen[k.String()] = true
	}
	var r Restored
	r.Fixes(maps.IPv6).BackendDeletes = []uint32{1}
	assert.Equal(t, 1, r.Fixes6.Writes())
	assert.False(t, r.Fixes6.Empty())
	assert.True(t, r.Fixes(maps.IPv4).Empty())
}

// ---- random corruption ---------------------------------------------------

type gen struct {
	r      *rand.Rand
	nextBE uint32
	beIDs  map[lb.L3n4Addr]lb.BackendID // one ID per backend address
	states map[lb.L3n4Addr]lb.BackendState
}

func (g *gen) backend(v6 bool, proto lb.L4Type) bk {
	var addr netip.Addr
	if v6 {
		addr = netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(1 + g.r.IntN(6))})
	} else {
		addr = netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + g.r.IntN(6))})
	}
	if proto == lb.ANY {
		proto = lb.TCP
	}
	a := lb.L3n4Addr{Addr: addr, Port: uint16(8080 + g.r.IntN(2)), Protocol: proto}
	id, ok := g.beIDs[a]
	if !ok {
		g.nextBE++
		id = lb.BackendID(g.nextBE)
		g.beIDs[a] = id
		g.states[a] = []lb.BackendState{lb.BackendStateActive, lb.BackendStateActive, lb.BackendStateTerminating, lb.BackendStateQuarantined}[g.r.IntN(4)]
	}
	return be(a.String(), id, g.states[a])
}

// services returns random consistent services of both families.
func (g *gen) services() []*Service {
	var out []*Service
	usedFE := map[lb.L3n4Addr]bool{}
	ids := g.r.Perm(40)
	n := g.r.IntN(10)
	protos := []lb.L4Type{lb.TCP, lb.UDP, lb.SCTP, lb.ANY}
	for i := range n {
		v6 := g.r.IntN(2) == 0
		var addr netip.Addr
		switch {
		case g.r.IntN(6) == 0 && v6:
			addr = netip.IPv6Unspecified()
		case g.r.IntN(6) == 0:
			addr = netip.IPv4Unspecified()
		case v6:
			addr = netip.AddrFrom16([16]byte{0xfd, 0, 14: 0x96, 15: byte(1 + g.r.IntN(3))})
		default:
			addr = netip.AddrFrom4([4]byte{10, 96, 0, byte(1 + g.r.IntN(3))})
		}
		f := lb.L3n4Addr{Addr: addr, Port: []uint16{53, 80}[g.r.IntN(2)], Protocol: protos[g.r.IntN(4)], Scope: lb.Scope(g.r.IntN(2))}
		if usedFE[f] {
			continue
		}
		usedFE[f] = true
		var bks []bk
		seen := map[lb.BackendID]bool{}
		for range g.r.IntN(6) {
			b := g.backend(f.IsIPv6(), f.Protocol)
			if !seen[b.id] {
				seen[b.id] = true
				bks = append(bks, b)
			}
		}
		s := svc(f.String(), lb.ServiceID(ids[i]+1), func(s *lb.Service) {
			s.Type = lb.ServiceType(g.r.IntN(6))
			if f.Scope == lb.ScopeExternal {
				s.ExtTrafficPolicyLocal = s.Type.HasExternalSide() && g.r.IntN(2) == 0
				s.IntTrafficPolicyLocal = g.r.IntN(2) == 0
				twin := f
				twin.Scope = lb.ScopeInternal
				if s.TwoScopes() && usedFE[twin] {
					s.ExtTrafficPolicyLocal, s.IntTrafficPolicyLocal = false, false
				}
				if s.TwoScopes() {
					usedFE[twin] = true
				}
			}
			for j := range s.Backends {
				s.Backends[j].NodeLocal = g.r.IntN(3) == 0
				if g.r.IntN(5) == 0 {
					s.Backends[j].Weight = uint16(g.r.IntN(300))
				}
			}
			if g.r.IntN(3) == 0 {
				s.SessionAffinity = true
				s.SessionAffinityTimeout = uint32(1 + g.r.IntN(20000))
			}
			s.LBAlgorithm = lb.LBAlgorithm(g.r.IntN(3))
			s.Source = lb.Source(g.r.IntN(2))
		}, bks...)
		out = append(out, s)
	}
	return out
}

func pick[E any](r *rand.Rand, s []E) (int, bool) {
	if len(s) == 0 {
		return 0, false
	}
	return r.IntN(len(s)), true
}

// corrupt applies one random corruption to d.
func (g *gen) corrupt(d *Dump) string {
	r := g.r
	fam := r.IntN(2)
	svcs := []*[]maps.ServiceEntry{&d.Services4, &d.Services6}[fam]
	bes := []*[]maps.BackendEntry{&d.Backends4, &d.Backends6}[fam]
	revs := []*[]maps.RevNATEntry{&d.RevNAT4, &d.RevNAT6}[fam]
	obes := []*[]maps.BackendEntry{&d.Backends4, &d.Backends6}[1-fam]
	orevs := []*[]maps.RevNATEntry{&d.RevNAT4, &d.RevNAT6}[1-fam]
	randAddr := func(f int) netip.Addr {
		if f == 1 {
			return netip.AddrFrom16([16]byte{0xfd, 0, 14: 0x99, 15: byte(r.IntN(4))})
		}
		return netip.AddrFrom4([4]byte{10, 99, 0, byte(r.IntN(4))})
	}
	masters := func() []int {
		var out []int
		for i, e := range *svcs {
			if e.Key.Slot == 0 {
				out = append(out, i)
			}
		}
		return out
	}
	anyBackendID := func() uint32 {
		all := slices.Concat(*bes, *obes)
		if i, ok := pick(r, all); ok && r.IntN(4) != 0 {
			return all[i].ID
		}
		return uint32(r.IntN(60))
	}
	switch c := r.IntN(21); c {
	case 20:
		// An lb_members record: of a random service, source (valid or
		// not), backend ID and kind.
		k := maps.MemberKey{RevNATIndex: uint16(1 + r.IntN(50)), Kind: maps.MemberKindService}
		if r.IntN(4) == 0 {
			k.BackendID = anyBackendID()
		}
		if r.IntN(4) == 0 {
			k.Kind = uint16(2 + r.IntN(3))
		}
		d.Members = append(d.Members, maps.MemberEntry{Key: k, Value: maps.MemberValue{Source: uint8(r.IntN(4))}})
		return "member record junk"
	case 0:
		if i, ok := pick(r, *svcs); ok {
			*svcs = slices.Delete(*svcs, i, i+1)
		}
		return "delete service entry"
	case 1:
		if i, ok := pick(r, *bes); ok {
			*bes = slices.Delete(*bes, i, i+1)
		}
		return "delete backend"
	case 2:
		if i, ok := pick(r, *revs); ok {
			*revs = slices.Delete(*revs, i, i+1)
		}
		return "delete revNAT"
	case 3:
		if i, ok := pick(r, *svcs); ok && (*svcs)[i].Key.Slot != 0 {
			(*svcs)[i].Value.BackendID = anyBackendID()
		}
		return "slot to random backend"
	case 4:
		// Give the frontend of one master the ID of another (any family).
		ms := masters()
		all := slices.Concat(d.Services4, d.Services6)
		if i, ok := pick(r, ms); ok {
			if j, ok := pick(r, all); ok {
				id := all[j].Value.RevNATIndex
				key := (*svcs)[ms[i]].Key
				for x := range *svcs {
					if kk := (*svcs)[x].Key; kk.Address == key.Address && kk.Port == key.Port && kk.Proto == key.Proto && kk.Scope == key.Scope {
						(*svcs)[x].Value.RevNATIndex = id
					}
				}
			}
		}
		return "duplicate service ID"
	case 5:
		// A second ID for a backend address, used by some of its slots.
		if i, ok := pick(r, *bes); ok {
			old := (*bes)[i].ID
			nid := uint32(100 + r.IntN(50))
			*bes = append(*bes, maps.BackendEntry{ID: nid, Value: (*bes)[i].Value})
			for x := range *svcs {
				if (*svcs)[x].Key.Slot != 0 && (*svcs)[x].Value.BackendID == old && r.IntN(2) == 0 {
					(*svcs)[x].Value.BackendID = nid
				}
			}
		}
		return "duplicate backend"
	case 6:
		if i, ok := pick(r, *bes); ok {
			*obes = append(*obes, maps.BackendEntry{ID: (*bes)[i].ID, Value: maps.BackendValue{Address: randAddr(1 - fam), Port: 80, Proto: 6}})
		}
		return "backend ID in both families"
	case 7:
		if i, ok := pick(r, masters()); ok {
			m := &(*svcs)[masters()[i]].Value
			m.Count, m.QCount = uint16(r.IntN(5)), uint16(r.IntN(3))
		}
		return "master count"
	case 8:
		if i, ok := pick(r, *bes); ok {
			(*bes)[i].Value.State = uint8(r.IntN(5))
		}
		return "backend state"
	case 9:
		i, ok1 := pick(r, *svcs)
		j, ok2 := pick(r, *svcs)
		if ok1 && ok2 && (*svcs)[i].Key.Slot != 0 && (*svcs)[j].Key.Slot != 0 {
			(*svcs)[i].Value, (*svcs)[j].Value = (*svcs)[j].Value, (*svcs)[i].Value
		}
		return "swap slots"
	case 10:
		if i, ok := pick(r, masters()); ok {
			e := (*svcs)[masters()[i]]
			key := e.Key
			key.Slot = e.Value.Count + e.Value.QCount + uint16(1+r.IntN(3))
			*svcs = append(*svcs, maps.ServiceEntry{Key: key, Value: maps.ServiceValue{BackendID: anyBackendID(), RevNATIndex: e.Value.RevNATIndex}})
		}
		return "extra slot"
	case 11:
		if i, ok := pick(r, *revs); ok {
			(*revs)[i].Value = maps.RevNATValue{Address: randAddr(fam), Port: 80}
		}
		return "wrong revNAT"
	case 12:
		all := slices.Concat(*revs, *orevs)
		if i, ok := pick(r, all); ok {
			*orevs = append(*orevs, maps.RevNATEntry{ID: all[i].ID, Value: maps.RevNATValue{Address: randAddr(1 - fam), Port: 53}})
		}
		return "revNAT in the other family"
	case 13:
		*revs = append(*revs, maps.RevNATEntry{ID: uint16(r.IntN(50)), Value: maps.RevNATValue{Address: randAddr(fam), Port: 80}})
		return "random revNAT"
	case 14:
		if i, ok := pick(r, masters()); ok {
			x := masters()[i]
			switch r.IntN(3) {
			case 0:
				(*svcs)[x].Value.RevNATIndex = 0
			case 1:
				(*svcs)[x].Key.Proto = 99
			case 2:
				(*svcs)[x].Key.Scope = 2
			}
		}
		return "invalid master"
	case 15:
		*bes = append(*bes, maps.BackendEntry{ID: uint32(r.IntN(200)), Value: maps.BackendValue{Address: randAddr(fam), Port: 8080, Proto: []uint8{6, 17, 99}[r.IntN(3)]}})
		return "random backend"
	case 16:
		if i, ok := pick(r, *svcs); ok && (*svcs)[i].Key.Slot != 0 {
			v := &(*svcs)[i].Value
			if r.IntN(2) == 0 {
				v.RevNATIndex = uint16(r.IntN(50))
			} else {
				v.Flags, v.QCount = uint8(r.IntN(256)), uint16(r.IntN(2))
			}
		}
		return "slot junk"
	case 17:
		if i, ok := pick(r, masters()); ok {
			v := &(*svcs)[masters()[i]].Value
			switch r.IntN(3) {
			case 0:
				v.BackendID = uint32(r.IntN(256)) << 24
			case 1:
				v.Flags ^= 1 << r.IntN(8)
			case 2:
				v.Flags2 ^= 1 << r.IntN(8)
			}
		}
		return "master junk"
	case 18:
		key := maps.ServiceKey{Address: randAddr(fam), Port: 53, Proto: 17, Slot: uint16(1 + r.IntN(3))}
		*svcs = append(*svcs, maps.ServiceEntry{Key: key, Value: maps.ServiceValue{BackendID: anyBackendID(), RevNATIndex: uint16(r.IntN(50))}})
		return "slot without master"
	default:
		// A new frontend (with a revNAT entry) reusing a random ID.
		id := uint16(1 + r.IntN(40))
		f := lb.L3n4Addr{Addr: randAddr(fam), Port: 443, Protocol: lb.TCP}
		s := &Service{Spec: lb.Service{Frontend: lb.Frontend{L3n4Addr: f, ID: lb.ServiceID(id)}}}
		if i, ok := pick(r, *bes); ok {
			s.Spec.Backends = []lb.Backend{BackendFromValue((*bes)[i].Value)}
			s.BackendIDs = []lb.BackendID{lb.BackendID((*bes)[i].ID)}
		}
		extra := dumpOf(s)
		if fam == 0 {
			d.Services4, d.RevNAT4 = append(d.Services4, extra.Services4...), append(d.RevNAT4, extra.RevNAT4...)
		} else {
			d.Services6, d.RevNAT6 = append(d.Services6, extra.Services6...), append(d.RevNAT6, extra.RevNAT6...)
		}
		return "new frontend with a used ID"
	}
}

// dedupeKeys keeps the last entry of each key, as a map would after the
// corruptions (so that the in-test maps and Rebuild see the same dump).
func dedupeKeys(d Dump) Dump {
	return stateOf(d).dump()
}

func TestRebuildRandomCorruption(t *testing.T) {
	r := testutil.Rand(t)
	for iter := range 400 {
		g := &gen{r: r, beIDs: map[lb.L3n4Addr]lb.BackendID{}, states: map[lb.L3n4Addr]lb.BackendState{}}
		orig := g.services()
		d := dumpOf(orig...)
		var applied []string
		for range r.IntN(7) {
			applied = append(applied, g.corrupt(&d))
		}
		d = dedupeKeys(d)
		ok := t.Run(fmt.Sprint(iter), func(t *testing.T) {
			t.Logf("corruptions: %v", applied)
			got := Rebuild(d)
			for _, s := range got.Services {
				require.Len(t, s.BackendIDs, len(s.Spec.Backends))
			}
			require.True(t, slices.IsSortedFunc(got.Services, func(a, b *Service) int { return int(a.ID()) - int(b.ID()) }))
			if len(applied) == 0 {
				require.Empty(t, got.Repairs)
				require.True(t, got.Fixes4.Empty() && got.Fixes6.Empty())
				want := slices.Clone(orig)
				slices.SortFunc(want, func(a, b *Service) int { return int(a.ID()) - int(b.ID()) })
				if len(want) == 0 {
					want = nil
				}
				require.Equal(t, want, got.Services)
			}
			checkShuffled(t, r, d, got)
			checkRepaired(t, d, got)
		})
		if !ok {
			t.FailNow()
		}
	}
}

// The large-family path (two goroutines) finds exactly what the serial one
// finds, repairs included.
func TestRebuildInHalvesEqualsSerial(t *testing.T) {
	var d Dump
	for i := range 1200 {
		s := benchService(4)
		s.Spec.Frontend.ID = lb.ServiceID(i + 1)
		s.Spec.Frontend.Addr = netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		for j := range s.BackendIDs {
			s.BackendIDs[j] = lb.BackendID(i*4 + j + 1)
			s.Spec.Backends[j].Addr = netip.AddrFrom4([4]byte{10, 1, byte((i*4 + j) >> 8), byte(i*4 + j)})
		}
		SlotOrder(s.Spec.Backends, s.BackendIDs)
		slots := Slots(s)
		switch i % 300 {
		case 7:
			slots = slots[1:] // slot 1 missing
		case 8:
			slots[2].Value.Flags = 1 // stray flags
		case 9:
			slots[0].Value.BackendID = 999999 // dangling
		}
		d.Services4 = append(append(d.Services4, slots...), Master(s))
		d.Backends4 = append(d.Backends4, BackendEntries(s)...)
		d.RevNAT4 = append(d.RevNAT4, RevNAT(s))
	}
	defer func(n int) { parallelGroups = n }(parallelGroups)
	parallelGroups = 1 << 30
	serial := Rebuild(d)
	parallelGroups = 2
	halves := Rebuild(d)
	require.NotEmpty(t, serial.Repairs)
	require.Equal(t, serial, halves)
}

// A dump that repeats a key (only a hand-made one can) keeps the least
// value of each key, whatever the order: adding greater duplicates of
// masters, slots, backends and revNAT entries changes nothing.
func TestRebuildRepeatedKeysKeepTheLeastValue(t *testing.T) {
	r := testutil.Rand(t)
	d := dumpOf(consistentServices()...)
	want := Rebuild(d)
	dup := cloneDump(d)
	for _, e := range d.Services4 {
		e.Value.Flags2 = 0xff // greater than the real value
		dup.Services4 = append(dup.Services4, e)
	}
	for _, e := range d.Services6 {
		e.Value.QCount++
		dup.Services6 = append(dup.Services6, e)
	}
	for _, e := range d.Backends4 {
		e.Value.Zone = 0xff
		dup.Backends4 = append(dup.Backends4, e)
	}
	for _, e := range d.RevNAT4 {
		e.Value.Port++
		dup.RevNAT4 = append(dup.RevNAT4, e)
	}
	for _, e := range d.RevNAT6 {
		e.Value.Address = e.Value.Address.Next()
		dup.RevNAT6 = append(dup.RevNAT6, e)
	}
	require.NotEmpty(t, d.RevNAT4)
	require.NotEmpty(t, d.RevNAT6)
	require.Equal(t, want, Rebuild(dup))
	checkShuffled(t, r, dup, want)
}

// A dump loaded in parts (restore streams the owners' dumps into a
// Loader as they arrive), backends or services first, rebuilds exactly
// as the whole dump does, repairs of both parts included.
func TestLoaderInPartsEqualsRebuild(t *testing.T) {
	r := testutil.Rand(t)
	d := dumpOf(consistentServices()...)
	// Repairs in both parts: an invalid and a duplicate backend (rule 4),
	// slots without master (rule 1), a master with rev_nat_index 0
	// (rule 2), an orphan revNAT entry (rule 7).
	b := d.Backends4[0]
	b.ID = 9001
	d.Backends4 = append(d.Backends4, b, maps.BackendEntry{ID: 9002, Value: maps.BackendValue{Address: netip.MustParseAddr("fd00::1"), Port: 80, Proto: 6}})
	d.Services4 = append(d.Services4,
		maps.ServiceEntry{Key: maps.ServiceKey{Address: netip.MustParseAddr("10.99.0.1"), Port: 80, Proto: 6, Slot: 1}, Value: maps.ServiceValue{BackendID: b.ID, RevNATIndex: 77}},
		maps.ServiceEntry{Key: maps.ServiceKey{Address: netip.MustParseAddr("10.99.0.2"), Port: 80, Proto: 6}, Value: maps.ServiceValue{Count: 1}},
		maps.ServiceEntry{Key: maps.ServiceKey{Address: netip.MustParseAddr("10.99.0.2"), Port: 80, Proto: 6, Slot: 1}, Value: maps.ServiceValue{BackendID: b.ID}},
	)
	d.RevNAT4 = append(d.RevNAT4, maps.RevNATEntry{ID: 4000, Value: maps.RevNATValue{Address: netip.MustParseAddr("10.99.9.9"), Port: 1}})
	r.Shuffle(len(d.Services4), func(i, j int) { d.Services4[i], d.Services4[j] = d.Services4[j], d.Services4[i] })
	r.Shuffle(len(d.Backends4), func(i, j int) { d.Backends4[i], d.Backends4[j] = d.Backends4[j], d.Backends4[i] })
	want := Rebuild(cloneDump(d))
	require.NotEmpty(t, want.Repairs)
	for _, order := range []string{"backends first", "services first", "both", "backends only", "services only"} {
		t.Run(order, func(t *testing.T) {
			l := NewLoader()
			switch order {
			case "backends first":
				l.Backends(d.backends())
				l.Services(d.services())
			case "services first":
				l.Services(d.services())
				l.Backends(d.backends())
			case "both":
				l.Services(d.services())
				l.Backends(d.backends())
				l.Services(d.services()) // a second call does nothing
			case "backends only":
				l.Backends(d.backends())
			case "services only":
				l.Services(d.services())
			}
			require.Equal(t, want, l.Rebuild(d))
		})
	}
}

// sortedKeys returns the keys of m in order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
