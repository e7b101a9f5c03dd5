package engine

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// randomRestored returns n services of up to 12 backends drawn from a pool
// of IPv4 and IPv6 backends (so that some are shared by several services),
// each backend with one ID and one state, as Rebuild gives them. The IPv6
// backends share a few /104 prefixes, or with spread each has its own.
func randomRestored(t *testing.T, n int, spread bool) []*table.Service {
	t.Helper()
	r := testutil.Rand(t)
	type pooled struct {
		b  lb.Backend
		id lb.BackendID
	}
	pool := make([]pooled, 4*n)
	for i := range pool {
		var a netip.Addr
		if r.IntN(3) == 0 {
			var b [16]byte
			b[0], b[1], b[2] = 0x20, 0x01, 0x0d
			b[12], b[13], b[14], b[15] = byte(r.IntN(4)), byte(i>>16), byte(i>>8), byte(i) // a few /104 prefixes
			if spread {
				b[10], b[11], b[12] = byte(i>>16), byte(i>>8), byte(i)
			}
			a = netip.AddrFrom16(b)
		} else {
			a = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		}
		st := lb.BackendStateActive
		if r.IntN(8) == 0 {
			st = lb.BackendStateTerminating
		}
		pool[i] = pooled{lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: a, Port: uint16(8000 + r.IntN(3)), Protocol: lb.TCP}, State: st, Weight: lb.DefaultBackendWeight}, lb.BackendID(i + 1)}
	}
	svcs := make([]*table.Service, n)
	for i := range svcs {
		svc := &table.Service{Spec: lb.Service{Frontend: lb.Frontend{ID: lb.ServiceID(i + 1), L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80, Protocol: lb.TCP}}}}
		seen := map[int]bool{}
		for range r.IntN(13) {
			j := r.IntN(len(pool))
			if seen[j] {
				continue
			}
			seen[j] = true
			svc.Spec.Backends = append(svc.Spec.Backends, pool[j].b)
			svc.BackendIDs = append(svc.BackendIDs, pool[j].id)
		}
		svcs[i] = svc
	}
	return svcs
}

// indexOf returns a core's backend index as plain maps.
func indexOf(c *Core) (map[addrkey.Backend]users, map[addrkey.Backend][]lb.ServiceID) {
	us := map[addrkey.Backend]users{}
	for k, u := range c.users.All {
		u.slot = 0 // where it is kept
		us[k] = u
	}
	return us, c.shared
}

func TestFillEqualsPut(t *testing.T) {
	for _, c := range []struct {
		name     string
		services int
		spread   bool
	}{
		{"IPv6 backends in a few prefixes", 3000, false},
		// More IPv6 prefixes than the packer learns: the keys of the others
		// are kept whole, the same ones as put keeps. (The services use
		// some 1.04 IPv6 backends per service of the pool's: with 8,000
		// services a seed in thirty used fewer than the packer's 8,192.)
		{"IPv6 backends each in its own prefix", 10000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			svcs := randomRestored(t, c.services, c.spread)
			installed := testFillEqualsPut(t, svcs)
			if c.spread {
				require.Equal(t, addrkey.MaxBackendPrefixes, installed.users.packer.Prefixes(), "the packer is full")
			}
		})
	}
	// A backend with two IDs (in two services): not what the table
	// restores (its rule 4 keeps one ID a backend), but fill must still
	// give put's index, so it fills it again put's way.
	t.Run("a backend with two IDs", func(t *testing.T) {
		svcs := randomRestored(t, 1000, false)
		maxID, seen := lb.BackendID(0), map[lb.L3n4Addr]bool{}
		for _, svc := range svcs {
			for _, id := range svc.BackendIDs {
				maxID = max(maxID, id)
			}
		}
		twice := 0
		for _, svc := range svcs {
			for i, b := range svc.Spec.Backends {
				if seen[b.L3n4Addr] && twice < 3 {
					maxID++
					svc.BackendIDs[i] = maxID // its second ID
					twice++
				}
				seen[b.L3n4Addr] = true
			}
		}
		require.Equal(t, 3, twice, "the pool is small enough that some backends are shared")
		testFillEqualsPut(t, svcs)
	})
	// IDs too sparse to be slots: fill indexes the backends inline.
	t.Run("sparse IDs", func(t *testing.T) {
		svcs := randomRestored(t, 1000, false)
		for _, svc := range svcs {
			for i := range svc.BackendIDs {
				svc.BackendIDs[i] += 1 << 24
			}
		}
		installed := testFillEqualsPut(t, svcs)
		require.Nil(t, installed.users.restored, "no slot")
	})
}

// checkIndex checks the index's own invariants: every restored backend
// has a slot of its own holding its users, every other slot is free, and
// live counts the slots in use.
func checkIndex(t *testing.T, x *backendIndex) {
	t.Helper()
	taken := map[uint32]bool{}
	for k, v := range x.keys.All {
		if !isSlot(v) {
			require.NotZero(t, v[1]&inlineBit, "backend %s: entry %#x", k, v)
			continue
		}
		require.False(t, taken[v[0]], "slot %d of two backends", v[0])
		taken[v[0]] = true
		require.NotZero(t, x.restored[v[0]], "backend %s: slot %d empty", k, v[0])
	}
	inUse := 0
	for s, v := range x.restored {
		if v != ([2]uint32{}) {
			inUse++
			require.True(t, taken[uint32(s)], "slot %d in use, of no backend", s)
		}
	}
	require.Equal(t, inUse, x.live)
	require.Equal(t, x.live == 0, x.restored == nil, "the array goes with its last backend")
}

func testFillEqualsPut(t *testing.T, svcs []*table.Service) (installed *Core) {
	t.Helper()
	serial := New(Config{})
	for _, svc := range svcs {
		serial.put(svc, nil, nil, nil, nil, nil)
	}
	installed = New(Config{})
	(&repairPlan{restored: &table.Restored{Services: svcs}}).install(installed, nil)

	wantUsers, wantShared := indexOf(serial)
	gotUsers, gotShared := indexOf(installed)
	require.NotEmpty(t, wantShared, "the pool is small enough that some backends are shared")
	require.Equal(t, wantUsers, gotUsers)
	require.Equal(t, wantShared, gotShared, "the same services in the same order")
	require.Equal(t, serial.users.Len(), installed.users.Len())
	require.Equal(t, serial.users.packer.Prefixes(), installed.users.packer.Prefixes())
	require.Equal(t, serial.services, installed.services)
	for _, svc := range svcs {
		id, ok := installed.byFE.Get(svc.Frontend())
		require.True(t, ok)
		require.Equal(t, svc.ID(), id)
	}
	checkIndex(t, &installed.users)

	// The index fill made is the one the engine then edits: half the
	// services go, and come back with other IDs (their backends that went
	// come back inline); then all go.
	for _, svc := range svcs[:len(svcs)/2] {
		serial.drop(svc, nil)
		installed.drop(svc, nil)
	}
	wantUsers, wantShared = indexOf(serial)
	gotUsers, gotShared = indexOf(installed)
	require.Equal(t, wantUsers, gotUsers)
	require.Equal(t, wantShared, gotShared)
	checkIndex(t, &installed.users)
	for _, svc := range svcs[:len(svcs)/2] {
		again := *svc
		again.BackendIDs = slices.Clone(svc.BackendIDs)
		for i := range again.BackendIDs {
			again.BackendIDs[i] += 1 << 28
		}
		serial.put(&again, nil, nil, nil, nil, nil)
		installed.put(&again, nil, nil, nil, nil, nil)
	}
	wantUsers, wantShared = indexOf(serial)
	gotUsers, gotShared = indexOf(installed)
	require.Equal(t, wantUsers, gotUsers)
	require.Equal(t, wantShared, gotShared)
	checkIndex(t, &installed.users)
	for _, svc := range svcs {
		installed.drop(svc, nil)
	}
	require.Zero(t, installed.users.Len())
	checkIndex(t, &installed.users)
	return installed
}

func TestFillOfNothing(t *testing.T) {
	c := New(Config{})
	(&repairPlan{restored: &table.Restored{}}).install(c, nil)
	require.Zero(t, c.users.Len())
	require.Nil(t, c.shared)
}

// A backend is bound while a service uses it or an op holds it: each
// step of an acquire, commit, update and rollback as the index sees it.
// The entry is 8 bytes.
func TestBackendIsBoundWhileAServiceUsesItOrAnOpHoldsIt(t *testing.T) {
	for _, u := range []users{{}, {id: 7, one: 1}, {id: lb.MaxBackendID, one: lb.MaxServiceID, state: lb.BackendStateMaintenance, flags: 0xff}} {
		require.Equal(t, u, unpackUsers(packUsers(u)), "packed in 8 bytes and back")
		require.False(t, isSlot(packUsers(u)), "never a slot")
	}
	c := New(Config{})
	k := addrkey.BackendOf(lb.L3n4Addr{Addr: netip.MustParseAddr("10.0.1.1"), Port: 8080, Protocol: lb.TCP})
	_, bound, err := c.hold(k)
	require.NoError(t, err)
	require.False(t, bound, "not bound: a fresh ID is asked for")
	c.bindFresh(k, 7, 1, lb.BackendStateActive)
	require.True(t, c.bound(k.L3n4()))
	u, _ := c.users.Get(k)
	require.Equal(t, users{id: 7, one: 1}, u, "bound as service 1's, as the commit leaves it")
	id, unbound := c.unbindFresh(k) // service 1's op rolls back
	require.True(t, unbound)
	require.Equal(t, lb.BackendID(7), id)
	require.False(t, c.bound(k.L3n4()))
	_, unbound = c.unbindFresh(k)
	require.False(t, unbound, "nothing to give back")
	c.bindFresh(k, 7, 1, lb.BackendStateActive) // bound again, committed (put leaves the entry)
	id, bound, err = c.hold(k)                  // service 2 acquires it
	require.NoError(t, err)
	require.True(t, bound)
	require.Equal(t, lb.BackendID(7), id)
	_, unbound = c.removeUser(k, 1) // service 1 drops it meanwhile
	require.False(t, unbound, "service 2's op holds it")
	require.True(t, c.bound(k.L3n4()), "held by service 2's op")
	id, unbound = c.unhold(k) // service 2's op rolls back
	require.True(t, unbound)
	require.Equal(t, lb.BackendID(7), id)
	require.False(t, c.bound(k.L3n4()))
	_, unbound = c.unhold(k)
	require.False(t, unbound, "nothing to give back")
}

// After any run of upserts and deletes, the index the ops kept (the
// commit writes a backend the op bound itself without reading it) is the
// one put builds from the table: the same IDs, users and states, nothing
// left held.
func TestIndexKeptByOpsEqualsTheOneBuiltFromTheTable(t *testing.T) {
	r := testutil.Rand(t)
	c, a := startedCore()
	fes := make([]lb.L3n4Addr, 16)
	for i := range fes {
		a := netip.AddrFrom4([4]byte{10, 96, 0, byte(i + 1)})
		if i%2 == 1 {
			a = netip.AddrFrom16([16]byte{0xfd, 1, 15: byte(i + 1)})
		}
		fes[i] = lb.L3n4Addr{Addr: a, Port: 80, Protocol: lb.TCP}
	}
	pool := make([]lb.Backend, 48)
	for i := range pool {
		a := netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)})
		if i%3 == 0 {
			a = netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(i + 1)})
		}
		pool[i] = lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: a, Port: 8080, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight}
	}
	upserted := 0
	for round := range 200 {
		if r.IntN(4) == 0 {
			reply := make(chan messages.DeleteReply, 1)
			c.Step(&messages.DeleteByFrontend{Frontend: fes[r.IntN(len(fes))], Reply: reply})
			a.settle()
			for _, an := range c.Answers() { // not found: answered at once
				an.Call.Answer(an.Reply)
			}
			<-reply
		} else {
			var svcs []*lb.Service
			for _, fi := range r.Perm(len(fes))[:1+r.IntN(6)] {
				s := &lb.Service{Frontend: lb.Frontend{L3n4Addr: fes[fi]}}
				for _, bi := range r.Perm(len(pool))[:r.IntN(12)] {
					if b := pool[bi]; b.Addr.Is4() == s.Frontend.Addr.Is4() {
						if r.IntN(4) == 0 { // one state per backend: shared ones change the others'
							b.State = lb.BackendStateQuarantined
						}
						s.Backends = append(s.Backends, b)
					}
				}
				svcs = append(svcs, s)
			}
			reply := make(chan messages.UpsertBatchReply, 1)
			c.Step(&messages.UpsertBatch{Services: svcs, Reply: reply})
			a.settle()
			for _, res := range (<-reply).Results {
				require.NoError(t, res.Err, "round %d", round)
				upserted++
			}
		}
		serial := New(Config{})
		for _, s := range c.services.all {
			serial.put(c.services.expand(s), nil, nil, nil, nil, nil)
		}
		require.Equal(t, usersOfAll(serial), usersOfAll(c), "round %d", round)
		checkIndex(t, &c.users)
	}
	require.Greater(t, upserted, 300)
}

// indexEntry is what the index says of one backend, whatever order its
// services were put in.
type indexEntry struct {
	id    lb.BackendID
	state lb.BackendState
	held  int
	users []lb.ServiceID // ascending
}

func usersOfAll(c *Core) map[addrkey.Backend]indexEntry {
	out := map[addrkey.Backend]indexEntry{}
	for k, u := range c.users.All {
		out[k] = indexEntry{id: u.id, state: u.state, held: u.held(), users: slices.Sorted(c.usersOf(k))}
	}
	return out
}

// bound reports whether k is bound (a service uses it, or an op holds it).
func (c *Core) bound(k lb.L3n4Addr) bool {
	_, ok := c.users.Get(addrkey.BackendOf(k))
	return ok
}

// The backend index behaves as one map whatever the mix of keys: IPv4
// backends in runs (kept in pages), IPv4 ones far apart (loose), IPv6
// ones (a map) and IPv4-mapped IPv6 addresses (their IPv4 address's key),
// through sets, rewrites and deletes; its users come back as they were
// set (packUsers). Where each kind of key goes is pagedindex.Packed's
// (TestPackedMatchesAMap).
func TestBackendIndexMatchesAMap(t *testing.T) {
	r := testutil.Rand(t)
	var keys []addrkey.Backend
	for _, a := range testutil.BackendAddrs(r, 8, 100, 200) {
		keys = append(keys, addrkey.BackendOf(lb.L3n4Addr{Addr: a.Addr(), Port: a.Port(), Protocol: lb.TCP}))
	}
	// the first run's first key, mapped: its IPv4 address's key
	keys = append(keys, addrkey.BackendOf(lb.L3n4Addr{Addr: netip.AddrFrom16(netip.AddrFrom4([4]byte{10, 1, 0, 0}).As16()), Port: 8080, Protocol: lb.TCP}))
	x := newBackendIndex()
	testutil.MatchesAMap(t, r, 20000, 1000, keys, func() users {
		return users{id: lb.BackendID(1 + r.IntN(1<<20)), one: lb.ServiceID(1 + r.IntN(1<<15)), state: lb.BackendState(r.IntN(3))}
	}, testutil.MapUnderTest[addrkey.Backend, users]{
		Get: x.Get, Set: x.Set, Len: x.Len, All: x.All,
		Delete: func(k addrkey.Backend) {
			if u, ok := x.Get(k); ok {
				x.Delete(k, u)
			}
		},
	})
}
