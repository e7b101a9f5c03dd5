package engine

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// queueKeys returns queue keys of every kind: frontends and backends of
// each scope and protocol, IPv4 in runs and scattered, IPv6, keys that
// differ from another in one field alone, and a key whose scope does not
// pack.
func queueKeys(r *rand.Rand, runs, perRun, scattered int) []qkey {
	var keys []qkey
	for i, ap := range testutil.BackendAddrs(r, runs, perRun, scattered) {
		a := lb.L3n4Addr{Addr: ap.Addr(), Port: ap.Port(), Protocol: []lb.L4Type{lb.TCP, lb.UDP, lb.SCTP}[i%3], Scope: lb.Scope(i % 2)}
		keys = append(keys, feQueue(a), beQueue(a))
		if i%7 == 0 {
			a.Protocol = lb.ANY
			keys = append(keys, beQueue(a))
		}
	}
	keys = append(keys,
		// An IPv4 address and its IPv4-mapped IPv6 form are two keys.
		feQueue(lb.L3n4Addr{Addr: netip.MustParseAddr("10.9.0.1"), Port: 80}),
		feQueue(lb.L3n4Addr{Addr: netip.MustParseAddr("::ffff:10.9.0.1"), Port: 80}),
		feQueue(lb.L3n4Addr{Addr: netip.MustParseAddr("10.9.0.1"), Port: 80, Scope: 1 << 7}),
		feQueue(lb.L3n4Addr{Addr: netip.MustParseAddr("255.255.255.255"), Port: 65535, Protocol: lb.SCTP, Scope: 1<<7 - 1}))
	return keys
}

func TestQueueTableBehavesAsAMap(t *testing.T) {
	r := testutil.Rand(t)
	ops := make([]op, 64)
	for _, size := range []struct{ runs, perRun, scattered, room int }{{1, 3, 2, 0}, {4, 50, 100, 1000}, {20, 200, 500, 0}} {
		qt := newQueueTable(size.room)
		if size.room == 0 {
			qt = queueTable{}
		}
		keys := queueKeys(r, size.runs, size.perRun, size.scattered)
		testutil.MatchesAMap(t, r, 30*len(keys), len(keys), keys, func() queue {
			return queue{head: &ops[r.IntN(len(ops))]}
		}, testutil.MapUnderTest[qkey, queue]{
			Get: func(k qkey) (queue, bool) {
				q := qt.get(k)
				return q, q.head != nil
			},
			Set:    qt.set,
			Delete: qt.del,
			Len:    qt.len,
			All:    qt.all,
		})
	}
}

func TestQueueTableLeavesNothingBehindOnceEmpty(t *testing.T) {
	r := testutil.Rand(t)
	keys := queueKeys(r, 10, 100, 300)
	want := map[qkey]bool{}
	for _, k := range keys {
		want[k] = true
	}
	var o op
	var qt queueTable
	for round := range 3 {
		for _, k := range keys {
			qt.set(k, queue{head: &o})
		}
		if qt.len() != len(want) {
			t.Fatalf("round %d: %d keys, want %d", round, qt.len(), len(want))
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys {
			qt.del(k)
			if q := qt.get(k); q.head != nil {
				t.Fatalf("round %d: %v found after its delete", round, k.l3n4())
			}
		}
		if qt.len() != 0 || len(qt.rest) != 0 {
			t.Fatalf("round %d: %d keys, %d whole keys left", round, qt.len(), len(qt.rest))
		}
		for i := range qt.slots {
			if qt.slots[i] != (queueSlot{}) {
				t.Fatalf("round %d: slot %d not cleared", round, i)
			}
		}
	}
}

func TestQueueTablePacksIPv4KeysLosslessly(t *testing.T) {
	r := testutil.Rand(t)
	packed := 0
	for _, k := range queueKeys(r, 4, 50, 200) {
		p, ok := packQueueKey(&k)
		if ok != (k.IP.Addr().Is4() && k.scope < 1<<7) {
			t.Fatalf("%v packed %v", k.l3n4(), ok)
		}
		if !ok {
			continue
		}
		packed++
		if got := unpackQueueKey(p); got != k {
			t.Fatalf("%v (backend %v) unpacks as %v (backend %v)", k.l3n4(), k.backend, got.l3n4(), got.backend)
		}
	}
	if packed == 0 {
		t.Fatal("no key packed")
	}
}

// A run of addresses (a node's pods) packs into consecutive words, and each
// block of them starts its probes in consecutive slots: their queues are
// side by side.
func TestQueueTableKeepsARunOfAddressesSideBySide(t *testing.T) {
	qt := newQueueTable(1000)
	var o op
	var first int
	for i := range queueBlock {
		a := lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 1, 2, byte(i)}), Port: 8080, Protocol: lb.TCP}
		k := beQueue(a)
		qt.set(k, queue{head: &o})
		p, _ := packQueueKey(&k)
		at, ok := qt.find(p)
		if !ok {
			t.Fatalf("%v not found", a)
		}
		if at != qt.home(p) {
			t.Fatalf("address %d of the run in slot %d, not its home %d (an empty table)", i, at, qt.home(p))
		}
		if i == 0 {
			first = at
		} else if at != first+i {
			t.Fatalf("address %d of the run in slot %d, the first in %d", i, at, first)
		}
	}
}

func TestQueueTableSetRefusesAQueueWithoutHead(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("set of a queue without a head did not panic")
		}
	}()
	var qt queueTable
	qt.set(feQueue(lb.L3n4Addr{Addr: netip.MustParseAddr("10.0.0.1"), Port: 80}), queue{})
}
