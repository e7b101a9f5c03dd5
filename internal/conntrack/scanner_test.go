package conntrack

import (
	"encoding"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// ctMaps are the four conntrack maps of a test, pinned under root as the
// datapath pins them.
type ctMaps struct {
	root string
	m    map[string]*ebpf.Map
}

var shapes = map[string][2]uint32{
	Forward4Name: {Key4Size, Entry4Size}, Reverse4Name: {Key4Size, RevEntry4Size},
	Forward6Name: {Key6Size, Entry6Size}, Reverse6Name: {Key6Size, RevEntry6Size},
}

// newCTMaps creates and pins LRU_HASH maps with SPEC17's key and value
// sizes (all four, or the names given) in a fresh pin directory.
func newCTMaps(tb testing.TB, names ...string) *ctMaps {
	tb.Helper()
	c := &ctMaps{root: testutil.PinDir(tb), m: map[string]*ebpf.Map{}}
	if len(names) == 0 {
		names = []string{Forward4Name, Reverse4Name, Forward6Name, Reverse6Name}
	}
	for _, name := range names {
		c.create(tb, name, shapes[name][0], shapes[name][1])
	}
	return c
}

func (c *ctMaps) create(tb testing.TB, name string, keySize, valueSize uint32) {
	tb.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.LRUHash, KeySize: keySize, ValueSize: valueSize, MaxEntries: 65536})
	require.NoError(tb, err)
	tb.Cleanup(func() { m.Close() })
	require.NoError(tb, m.Pin(filepath.Join(c.root, name)))
	c.m[name] = m
}

func mustBytes(tb testing.TB, v encoding.BinaryMarshaler) []byte {
	tb.Helper()
	b, err := v.MarshalBinary()
	require.NoError(tb, err)
	return b
}

func (c *ctMaps) putForward(tb testing.TB, k Key, e Entry) {
	tb.Helper()
	name := Forward4Name
	if k.Is6() {
		name = Forward6Name
	}
	require.NoError(tb, c.m[name].Put(mustBytes(tb, k), mustBytes(tb, e)))
}

func (c *ctMaps) putReverse(tb testing.TB, k Key, v RevEntry) {
	tb.Helper()
	name := Reverse4Name
	if k.Is6() {
		name = Reverse6Name
	}
	require.NoError(tb, c.m[name].Put(mustBytes(tb, k), mustBytes(tb, v)))
}

// keys returns the keys map name holds, decoded and sorted by String.
func (c *ctMaps) keys(tb testing.TB, name string) []string {
	tb.Helper()
	var out []string
	it := c.m[name].Iterate()
	kb, vb := make([]byte, shapes[name][0]), make([]byte, shapes[name][1])
	for it.Next(&kb, &vb) {
		var k Key
		require.NoError(tb, k.UnmarshalBinary(kb))
		out = append(out, k.String())
	}
	require.NoError(tb, it.Err())
	slices.Sort(out)
	return out
}

func sorted(keys ...Key) []string {
	out := []string{}
	for _, k := range keys {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// fixedClock returns a clock stuck at now.
func fixedClock(now uint64) func() uint64 { return func() uint64 { return now } }

// runPass ticks s until a pass ends (at most max ticks) and returns the
// ticks it took.
func runPass(tb testing.TB, s *Scanner, max int) int {
	tb.Helper()
	for i := 1; i <= max; i++ {
		rep, err := s.Tick()
		require.NoError(tb, err)
		if rep.PassDone {
			return i
		}
	}
	tb.Fatalf("no full pass in %d ticks", max)
	return 0
}

// snat builds a SNAT flow: forward key and entry, reverse key and entry.
func snat(client netip.Addr, cport uint16, vip netip.Addr, proto, flags uint8, lastSeen uint64, backend, nat netip.Addr, natPort uint16) (Key, Entry, Key, RevEntry) {
	fk := Key{Src: client, Dst: vip, SrcPort: cport, DstPort: 80, Proto: proto}
	e := Entry{LastSeen: lastSeen, BackendID: 1, Flags: flags, BackendAddr: backend, BackendPort: 8080, NATAddr: nat, NATPort: natPort}
	rk, _ := e.ReverseKey(fk)
	return fk, e, rk, RevEntry{LastSeen: lastSeen, Client: client, Frontend: vip, ClientPort: cport, FrontendPort: 80}
}

// One pass over real maps of both families keeps exactly the live flows:
// expired forward entries go with their reverse partners, orphaned
// reverse entries go, DSR entries need no partner; the stats count each.
func TestPassKeepsExactlyTheLiveFlows(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			c := newCTMaps(t)
			now := uint64(1_000_000) * sec // a fixed clock far from boot: an hour's age fits on a machine up for minutes
			ago := func(d time.Duration) uint64 { return now - uint64(d) }
			put := func(fk Key, e Entry, rk Key, v RevEntry) {
				c.putForward(t, fk, e)
				if e.Flags&FlagDSR == 0 {
					c.putReverse(t, rk, v)
				}
			}
			// IPv4.
			liveTCP, e, liveTCPRev, v := snat(client4, 1, vip4, ProtoTCP, FlagReplied, ago(time.Hour), backend4, nat4, 1001)
			put(liveTCP, e, liveTCPRev, v)
			closing, e, closingRev, v := snat(client4, 2, vip4, ProtoTCP, FlagReplied|FlagClosing, ago(11*time.Second), backend4, nat4, 1002)
			put(closing, e, closingRev, v)
			synOnly, e, synOnlyRev, v := snat(client4, 3, vip4, ProtoTCP, 0, ago(61*time.Second), backend4, nat4, 1003)
			put(synOnly, e, synOnlyRev, v)
			liveUDP, e, liveUDPRev, v := snat(client4, 4, vip4, ProtoUDP, FlagReplied, ago(59*time.Second), backend4, nat4, 1004)
			put(liveUDP, e, liveUDPRev, v)
			dsrOld, e, _, _ := snat(client4, 5, vip4, ProtoUDP, FlagDSR, ago(2*time.Minute), backend4, unspec4, 0)
			put(dsrOld, e, Key{}, RevEntry{})
			dsrLive, e, _, _ := snat(client4, 6, vip4, ProtoTCP, FlagDSR|FlagReplied, ago(time.Minute), backend4, unspec4, 0)
			put(dsrLive, e, Key{}, RevEntry{})
			_, _, orphan4, v := snat(client4, 7, vip4, ProtoTCP, 0, now, backend4, nat4, 1007) // forward evicted by the LRU
			c.putReverse(t, orphan4, v)
			// IPv6.
			live6, e, live6Rev, v := snat(client6, 1, vip6, ProtoUDP, 0, ago(time.Second), backend6, unspec6, 2001)
			put(live6, e, live6Rev, v)
			old6, e, old6Rev, v := snat(client6, 2, vip6, 132, 0, ago(time.Hour), backend6, unspec6, 2002)
			put(old6, e, old6Rev, v)
			_, _, orphan6, v := snat(client6, 3, vip6, ProtoUDP, 0, now, backend6, unspec6, 2003)
			c.putReverse(t, orphan6, v)

			s, err := NewScanner(Config{Root: c.root, NoBatch: !batch, Clock: fixedClock(now + uint64(time.Millisecond))})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.Equal(t, 1, runPass(t, s, 1), "a pass of a few entries takes one tick")

			require.Equal(t, sorted(liveTCP, liveUDP, dsrLive), c.keys(t, Forward4Name))
			require.Equal(t, sorted(liveTCPRev, liveUDPRev), c.keys(t, Reverse4Name))
			require.Equal(t, sorted(live6), c.keys(t, Forward6Name))
			require.Equal(t, sorted(live6Rev), c.keys(t, Reverse6Name))
			require.NotContains(t, c.keys(t, Reverse4Name), closingRev.String())
			require.NotContains(t, c.keys(t, Reverse4Name), synOnlyRev.String())
			require.NotContains(t, c.keys(t, Reverse6Name), old6Rev.String())

			st := s.Stats()
			require.Equal(t, batch, st.Batch)
			require.False(t, st.Idle)
			require.Equal(t, uint64(1), st.Passes)
			require.Empty(t, st.LastError)
			byName := map[string]MapStats{}
			for _, m := range st.Maps {
				byName[m.Name] = m
			}
			require.Equal(t, MapStats{Name: Forward4Name, Present: true, Entries: 3, Alive: ProtoCounts{TCP: 2, UDP: 1}, Scanned: 6, DeletedExpired: 3}, byName[Forward4Name])
			require.Equal(t, MapStats{Name: Reverse4Name, Reverse: true, Present: true, Entries: 2, Alive: ProtoCounts{TCP: 1, UDP: 1}, Scanned: 3, DeletedExpired: 2, DeletedOrphans: 1}, byName[Reverse4Name])
			require.Equal(t, MapStats{Name: Forward6Name, Is6: true, Present: true, Entries: 1, Alive: ProtoCounts{UDP: 1}, Scanned: 2, DeletedExpired: 1}, byName[Forward6Name])
			require.Equal(t, MapStats{Name: Reverse6Name, Reverse: true, Is6: true, Present: true, Entries: 1, Alive: ProtoCounts{UDP: 1}, Scanned: 2, DeletedExpired: 1, DeletedOrphans: 1}, byName[Reverse6Name])
			exp, orph := st.Deleted(false)
			require.Equal(t, [2]uint64{5, 1}, [2]uint64{exp, orph})
		})
	}
}

// A tick reads at most PerTick entries and the next goes on from there:
// n entries take ceil(n/PerTick) ticks, every entry is read once, and the
// expired ones are all gone when the pass ends (not before the tick that
// reads them).
func TestScanIsBoundedPerTickAndResumes(t *testing.T) {
	const n, perTick = 1000, 64
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			c := newCTMaps(t)
			now := uint64(1_000_000) * sec // a fixed clock far from boot: an hour's age fits on a machine up for minutes
			for i := range n {
				age := time.Second
				if i%2 == 1 {
					age = time.Hour
				}
				fk, e, _, _ := snat(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(i), vip4, ProtoUDP, FlagDSR, now-uint64(age), backend4, unspec4, 0)
				c.putForward(t, fk, e)
			}
			s, err := NewScanner(Config{Root: c.root, PerTick: perTick, NoBatch: !batch, Clock: fixedClock(now)})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			want := (n + perTick - 1) / perTick
			scanned, deleted := 0, 0
			for tick := 1; tick <= want; tick++ {
				rep, err := s.Tick()
				require.NoError(t, err)
				require.LessOrEqual(t, rep.Scanned, perTick, "tick %d", tick)
				scanned += rep.Scanned
				deleted += rep.Deleted
				require.Equal(t, tick == want, rep.PassDone, "tick %d of %d", tick, want)
				if tick < want {
					require.Greater(t, len(c.keys(t, Forward4Name)), n/2, "tick %d: not everything read yet", tick)
				}
			}
			require.Equal(t, n, scanned, "every entry read once")
			require.Equal(t, n/2, deleted)
			require.Len(t, c.keys(t, Forward4Name), n/2)
			st := s.Stats()
			require.Equal(t, uint64(1), st.Passes)
			require.Equal(t, uint64(want), st.Ticks)
			require.Equal(t, n/2, st.Maps[0].Entries)
			require.Positive(t, st.LastPass)

			// The next pass starts over and finds nothing more to delete.
			ticks := runPass(t, s, want+1)
			require.LessOrEqual(t, ticks, (n/2+perTick-1)/perTick+1)
			require.Len(t, c.keys(t, Forward4Name), n/2)
		})
	}
}

// Without pinned maps the scanner idles: every tick is a pass over
// nothing, no error; once the datapath pins its maps the next pass finds
// them. A map pinned with another shape is reported and left alone.
func TestMissingMapsIdleAndIncompatibleOnesAreReported(t *testing.T) {
	root := testutil.PinDir(t)
	now := uint64(1_000_000) * sec // a fixed clock far from boot: an hour's age fits on a machine up for minutes
	s, err := NewScanner(Config{Root: root, Clock: fixedClock(now)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	for range 3 {
		rep, err := s.Tick()
		require.NoError(t, err)
		require.True(t, rep.PassDone)
		require.Zero(t, rep.Scanned)
	}
	st := s.Stats()
	require.True(t, st.Idle)
	require.Equal(t, uint64(3), st.Passes)
	for _, m := range st.Maps {
		require.False(t, m.Present, m.Name)
	}

	c := &ctMaps{root: root, m: map[string]*ebpf.Map{}}
	c.create(t, Forward4Name, Key4Size, Entry4Size)
	c.create(t, Forward6Name, Key6Size, Entry4Size) // wrong value size
	fk, e, _, _ := snat(client4, 1, vip4, ProtoUDP, FlagDSR, now-uint64(time.Hour), backend4, unspec4, 0)
	c.putForward(t, fk, e)
	rep, err := s.Tick()
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, Forward6Name)
	require.True(t, rep.PassDone)
	require.Equal(t, 1, rep.Deleted)
	require.Empty(t, orEmpty(c.keys(t, Forward4Name)))
	st = s.Stats()
	require.False(t, st.Idle)
	require.True(t, st.Maps[0].Present)
	require.False(t, st.Maps[2].Present)
	require.Contains(t, st.LastError, "pinned conntrack map incompatible")
}

// A reverse map whose forward map is not pinned is not scanned: without
// the partners every entry would look orphaned.
func TestReverseMapWithoutForwardMapIsLeftAlone(t *testing.T) {
	c := newCTMaps(t, Reverse4Name)
	_, _, rk, v := snat(client4, 1, vip4, ProtoUDP, 0, 0, backend4, nat4, 1)
	c.putReverse(t, rk, v)
	s, err := NewScanner(Config{Root: c.root})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.Equal(t, 1, runPass(t, s, 1))
	require.Equal(t, sorted(rk), c.keys(t, Reverse4Name))
	st := s.Stats()
	require.True(t, st.Idle)
	require.False(t, st.Maps[1].Present)
}

// Property (seeded, TEST_SEED): after one full pass over random flows of
// both families — live, expired, DSR, orphaned, with reverse entries that
// point elsewhere — the maps hold exactly the live flows: no expired or
// orphaned entry remains, and no live one was deleted.
func TestPassLeavesExactlyLiveEntriesProperty(t *testing.T) {
	rng := testutil.Rand(t)
	for round := range 4 {
		batch := round%2 == 0
		perTick := MinPerTick + rng.IntN(200)
		t.Run(fmt.Sprintf("round%d/batch=%v/perTick=%d", round, batch, perTick), func(t *testing.T) {
			checkRandomPass(t, rng, batch, perTick)
		})
	}
}

func checkRandomPass(t *testing.T, rng *rand.Rand, batch bool, perTick int) {
	c := newCTMaps(t)
	now := uint64(1_000_000) * sec // a fixed clock: the ages are exact
	to := DefaultTimeouts()
	fwd := map[Key]Entry{}
	rev := map[Key]RevEntry{}
	n := 200 + rng.IntN(800)
	protos := []uint8{ProtoTCP, ProtoTCP, ProtoUDP, 132}
	for i := range n {
		is6 := rng.IntN(3) == 0
		client, vip, backend, nat := client4, vip4, backend4, nat4
		if is6 {
			client, vip, backend, nat = client6, vip6, backend6, unspec6
		}
		client = addrPlus(client, i)
		proto := protos[rng.IntN(len(protos))]
		flags := uint8(rng.IntN(8))
		life := to.Lifetime(proto, flags)
		age := uint64(life) - uint64(2*time.Second) + uint64(rng.IntN(4))*uint64(time.Second) // around the limit
		if rng.IntN(4) == 0 {
			age = uint64(rng.Int64N(int64(2 * life)))
		}
		fk, e, rk, v := snat(client, uint16(1+rng.IntN(60000)), vip, proto, flags, now-age, backend, nat, uint16(i+1))
		switch rng.IntN(10) {
		case 0: // forward evicted: the reverse entry is an orphan
			if e.Flags&FlagDSR == 0 {
				rev[rk] = v
			}
		case 1: // reverse entry names another flow than its forward key's
			fwd[fk] = e
			if e.Flags&FlagDSR == 0 {
				v.ClientPort++
				rev[rk] = v
			}
		default:
			fwd[fk] = e
			if e.Flags&FlagDSR == 0 && rng.IntN(10) != 0 { // sometimes the reverse entry is evicted
				rev[rk] = v
			}
		}
	}
	for k, e := range fwd {
		c.putForward(t, k, e)
	}
	for k, v := range rev {
		c.putReverse(t, k, v)
	}
	var wantF4, wantF6, wantR4, wantR6 []Key
	for k, e := range fwd {
		if to.Expired(e, k.Proto, now) {
			continue
		}
		if k.Is6() {
			wantF6 = append(wantF6, k)
		} else {
			wantF4 = append(wantF4, k)
		}
	}
	for k, v := range rev {
		fk := v.ForwardKey(k)
		e, ok := fwd[fk]
		if !ok || to.Expired(e, fk.Proto, now) {
			continue
		}
		if rk, ok := e.ReverseKey(fk); !ok || rk != k {
			continue
		}
		if k.Is6() {
			wantR6 = append(wantR6, k)
		} else {
			wantR4 = append(wantR4, k)
		}
	}

	s, err := NewScanner(Config{Root: c.root, PerTick: perTick, NoBatch: !batch, Clock: fixedClock(now)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	total := len(fwd) + len(rev)
	runPass(t, s, 2*(total/perTick+5))
	require.Equal(t, sorted(wantF4...), orEmpty(c.keys(t, Forward4Name)))
	require.Equal(t, sorted(wantR4...), orEmpty(c.keys(t, Reverse4Name)))
	require.Equal(t, sorted(wantF6...), orEmpty(c.keys(t, Forward6Name)))
	require.Equal(t, sorted(wantR6...), orEmpty(c.keys(t, Reverse6Name)))
	st := s.Stats()
	var deleted uint64
	for _, m := range st.Maps {
		deleted += m.DeletedExpired + m.DeletedOrphans
	}
	kept := len(wantF4) + len(wantF6) + len(wantR4) + len(wantR6)
	require.Equal(t, uint64(total-kept), deleted, "every deletion counted once")
	require.Equal(t, len(wantF4), st.Maps[0].Entries)
	require.Equal(t, len(wantR6), st.Maps[3].Entries)
}

// addrPlus returns a plus i in its last two bytes.
func addrPlus(a netip.Addr, i int) netip.Addr {
	b := a.As16()
	b[14], b[15] = byte(i>>8), byte(i)
	if a.Is4() {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}
