package datapath

import (
	"encoding/binary"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// affinityKey is lb4_affinity_key / lb6_affinity_key of the socket LB:
// the client's network namespace cookie (host order) in the first 8
// bytes, the service ID (network order), netns_cookie = 1.
func affinityKey(v6 bool, cookie uint64, rev lb.ServiceID) []byte {
	off := 8
	if v6 {
		off = 16
	}
	b := make([]byte, off+8)
	binary.LittleEndian.PutUint64(b[0:8], cookie)
	binary.BigEndian.PutUint16(b[off:off+2], uint16(rev))
	b[off+2] = 1
	return b
}

// affinityVal is struct lb_affinity_val.
func affinityVal(lastUsed uint64, backendID uint32) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b[0:8], lastUsed)
	binary.LittleEndian.PutUint32(b[8:12], backendID)
	return b
}

// nowSeconds is bpf_ktime_get_ns() / 1e9: CLOCK_MONOTONIC seconds.
func nowSeconds(t testing.TB) uint64 {
	var ts unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	return uint64(ts.Sec)
}

func netnsCookie(t testing.TB, h *helper) uint64 {
	t.Helper()
	r := h.do(t, request{Op: "netns-cookie"}, 10*time.Second)
	c, err := strconv.ParseUint(strings.TrimSpace(r.Output), 10, 64)
	require.NoError(t, err)
	return c
}

// setMatch writes the lb_affinity_match entry of a backend of service
// rev if the engine has not (an engine without the affinity-match family
// does not): the datapath reads what the control plane would write.
func setMatch(t testing.TB, match *ebpf.Map, backendID uint32, rev lb.ServiceID) {
	t.Helper()
	var v uint8
	if err := match.Lookup(memberKey(backendID, rev), &v); err == nil {
		return
	}
	require.NoError(t, match.Put(memberKey(backendID, rev), uint8(0)))
}

// unsetMatch deletes the entry of a backend that left the service, unless
// the engine already did.
func unsetMatch(t testing.TB, match *ebpf.Map, backendID uint32, rev lb.ServiceID) {
	t.Helper()
	if err := match.Delete(memberKey(backendID, rev)); err != nil {
		require.ErrorIs(t, err, ebpf.ErrKeyNotExist)
	}
}

// only returns the single name of counts, failing if there are more.
func only(t testing.TB, r response) string {
	t.Helper()
	require.Zero(t, r.Failed, "errors: %v", r.Errors)
	require.Len(t, r.Names, 1, "not one backend: %v", r.Names)
	return slices.Collect(maps.Keys(r.Names))[0]
}

// Session affinity: the client is the socket's network namespace. Two
// clients (helpers in two network namespaces of one cgroup) each stick to
// the backend they were given; when that backend leaves the service (its
// slot and lb_affinity_match entry removed) the client moves to another
// and sticks there; an entry older than the timeout is not used.
//
// Each namespace has its own replica of every backend (same address, port
// and name), so that both clients reach "the same" backends.
func TestSessionAffinity(t *testing.T) {
	for _, fam := range []struct {
		name string
		v6   bool
	}{{"IPv4", false}, {"IPv6", true}} {
		t.Run(fam.name, func(t *testing.T) {
			e := newEnv(t, true) // helper A in a namespace of its own
			hb := startHelper(t, e.cgroup, true)
			setupNetNSOf(t, hb)
			e.v6 = fam.v6
			clients := []*helper{e.helper, hb}

			var bs []*echo
			for i := range 3 {
				name := "aff" + strconv.Itoa(i+1)
				a := startEcho(t, e.netNS, name, e.backendIP(i), true, false)
				startEchoAt(t, hb.NetNS, name, a.addr, true, false)
				bs = append(bs, a)
			}
			byName := map[string]*echo{}
			for _, b := range bs {
				byName[b.name] = b
			}
			vip := e.vip()
			svc := &lb.Service{
				Frontend:        lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 80, Protocol: lb.TCP}},
				Backends:        backends(bs, lb.TCP),
				SessionAffinity: true, SessionAffinityTimeout: 600,
			}
			rev := e.upsertSvc(t, svc)
			ids := map[string]uint32{}
			match := e.pinnedMap(t, "lb_affinity_match")
			for _, b := range bs {
				ids[b.name] = e.backendID(t, b.addr)
				setMatch(t, match, ids[b.name], rev)
			}
			affName := "lb4_affinity"
			if fam.v6 {
				affName = "lb6_affinity"
			}
			aff := e.pinnedMap(t, affName)
			recorded := func(h *helper) (uint32, uint64) {
				t.Helper()
				v, err := aff.LookupBytes(affinityKey(fam.v6, netnsCookie(t, h), rev))
				require.NoError(t, err)
				require.NotNil(t, v, "no affinity entry for the client")
				return binary.LittleEndian.Uint32(v[8:12]), binary.LittleEndian.Uint64(v[0:8])
			}

			// Each client sticks to one backend, the one recorded for its
			// namespace.
			cookies := map[uint64]bool{}
			given := map[*helper]string{}
			for _, h := range clients {
				cookies[netnsCookie(t, h)] = true
				r := h.do(t, request{Op: "tcp", Addr: addr(vip, 80), N: 200}, time.Minute)
				given[h] = only(t, r)
				id, last := recorded(h)
				require.Equal(t, ids[given[h]], id, "the recorded backend is the one the client reached")
				require.InDelta(t, nowSeconds(t), last, 2)
			}
			require.Len(t, cookies, 2, "two namespaces, two cookies")
			t.Logf("client A on %s, client B on %s", given[clients[0]], given[clients[1]])
			// B's backend given to A by hand: A follows its entry.
			require.NoError(t, aff.Put(affinityKey(fam.v6, netnsCookie(t, clients[0]), rev), affinityVal(nowSeconds(t), ids[given[clients[1]]])))
			r := e.helper.do(t, request{Op: "tcp", Addr: addr(vip, 80), N: 50}, time.Minute)
			require.Equal(t, given[clients[1]], only(t, r))
			given[clients[0]] = given[clients[1]]

			// The shared backend leaves the service: both move, each to a
			// backend it then sticks to.
			gone := given[clients[0]]
			var rest []*echo
			for _, b := range bs {
				if b.name != gone {
					rest = append(rest, b)
				}
			}
			svc.Backends = backends(rest, lb.TCP)
			e.upsertSvc(t, svc)
			unsetMatch(t, match, ids[gone], rev)
			for _, h := range clients {
				r := h.do(t, request{Op: "tcp", Addr: addr(vip, 80), N: 200}, time.Minute)
				now := only(t, r)
				require.NotEqual(t, gone, now, "moved off the removed backend")
				id, _ := recorded(h)
				require.Equal(t, ids[now], id)
				given[h] = now
			}

			// A backend whose lb_affinity_match entry is gone (but still
			// slotted) is not stuck to either.
			a := clients[0]
			cur := given[a]
			require.NoError(t, match.Delete(memberKey(ids[cur], rev)))
			moved := 0
			for range 30 {
				require.NoError(t, aff.Put(affinityKey(fam.v6, netnsCookie(t, a), rev), affinityVal(nowSeconds(t), ids[cur])))
				r := a.do(t, request{Op: "tcp", Addr: addr(vip, 80), N: 1}, time.Minute)
				if only(t, r) != cur {
					moved++
				}
			}
			require.Positive(t, moved, "an entry for a backend without match entry was used 30 times out of 30")
			setMatch(t, match, ids[cur], rev)

			// Timeout 1 s: an entry used 2 s ago is not used (the choice is
			// random again: 30 trials never all land on it), one used now is.
			svc.SessionAffinityTimeout = 1
			e.upsertSvc(t, svc)
			key := affinityKey(fam.v6, netnsCookie(t, a), rev)
			stale := 0
			for range 30 {
				require.NoError(t, aff.Put(key, affinityVal(nowSeconds(t)-2, ids[cur])))
				r := a.do(t, request{Op: "tcp", Addr: addr(vip, 80), N: 1}, time.Minute)
				if only(t, r) == cur {
					stale++
				}
				_, last := recorded(a)
				require.InDelta(t, nowSeconds(t), last, 1, "a new choice is recorded now")
			}
			require.Less(t, stale, 30, "an expired entry was used 30 times out of 30")
			require.NoError(t, aff.Put(key, affinityVal(nowSeconds(t), ids[cur])))
			r = a.do(t, request{Op: "tcp", Addr: addr(vip, 80), N: 50}, time.Minute)
			require.Equal(t, cur, only(t, r), "a fresh entry is used")
			t.Logf("expired entry's backend chosen again in %d of 30 trials (random: ~15 expected)", stale)
		})
	}
}
