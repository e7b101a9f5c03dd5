package actorlb

import (
	"context"
	"encoding"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/conntrack"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

func ctBytes(tb testing.TB, v encoding.BinaryMarshaler) []byte {
	tb.Helper()
	b, err := v.MarshalBinary()
	require.NoError(tb, err)
	return b
}

// pinCT pins the four conntrack maps under root, as the datapath does.
func pinCT(tb testing.TB, root string) map[string]*ebpf.Map {
	tb.Helper()
	out := map[string]*ebpf.Map{}
	for name, kv := range map[string][2]uint32{
		conntrack.Forward4Name: {conntrack.Key4Size, conntrack.Entry4Size}, conntrack.Reverse4Name: {conntrack.Key4Size, conntrack.RevEntry4Size},
		conntrack.Forward6Name: {conntrack.Key6Size, conntrack.Entry6Size}, conntrack.Reverse6Name: {conntrack.Key6Size, conntrack.RevEntry6Size},
	} {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.LRUHash, KeySize: kv[0], ValueSize: kv[1], MaxEntries: 1024})
		require.NoError(tb, err)
		tb.Cleanup(func() { m.Close() })
		require.NoError(tb, m.Pin(filepath.Join(root, name)))
		out[name] = m
	}
	return out
}

// The façade's GC collects pinned maps on demand and on its timer,
// reports per-map figures, and refuses bad config naming the field.
func TestConntrackGCCollectsAndReports(t *testing.T) {
	root := testutil.PinDir(t)
	ms := pinCT(t, root)
	now := uint64(100 * time.Hour) // the GC's clock below: far from boot, so an hour's age fits
	vip, backend, nat := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("192.168.0.1")
	for i, age := range []time.Duration{time.Second, time.Hour} {
		fk := conntrack.Key{Src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Dst: vip, SrcPort: 1000, DstPort: 80, Proto: conntrack.ProtoTCP}
		e := conntrack.Entry{LastSeen: now - uint64(age), BackendID: 1, Flags: conntrack.FlagReplied, BackendAddr: backend, BackendPort: 8080, NATAddr: nat, NATPort: uint16(30000 + i)}
		rk, _ := e.ReverseKey(fk)
		v := conntrack.RevEntry{Client: fk.Src, Frontend: vip, ClientPort: 1000, FrontendPort: 80}
		require.NoError(t, ms[conntrack.Forward4Name].Put(ctBytes(t, fk), ctBytes(t, e)))
		require.NoError(t, ms[conntrack.Reverse4Name].Put(ctBytes(t, rk), ctBytes(t, v)))
	}
	// An orphan: its forward entry was evicted.
	orphan := conntrack.Key{Src: backend, Dst: nat, SrcPort: 8080, DstPort: 40000, Proto: conntrack.ProtoTCP}
	require.NoError(t, ms[conntrack.Reverse4Name].Put(ctBytes(t, orphan), ctBytes(t, conntrack.RevEntry{Client: netip.MustParseAddr("10.9.9.9"), Frontend: vip})))

	ctx := context.Background()
	g, err := StartConntrackGC(ctx, ConntrackConfig{Root: root, Interval: -1, Logger: quietLogger(),
		Timeouts: ConntrackTimeouts{TCPEstablished: 30 * time.Minute}, clock: func() uint64 { return now }})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	rep, err := g.Tick(ctx)
	require.NoError(t, err)
	require.Equal(t, ConntrackTickReport{Scanned: 4, Deleted: 3, PassDone: true}, rep, "the expired flow's reverse entry goes with it, before the reverse map is read")
	st, err := g.Stats(ctx)
	require.NoError(t, err)
	require.False(t, st.Idle)
	require.Equal(t, uint64(1), st.Passes)
	require.Equal(t, DefaultConntrackPerTick, st.PerTick)
	require.Equal(t, ConntrackMapStats{Name: "lb4_ct", Family: "ipv4", Present: true, Entries: 1, TCP: 1, Scanned: 2, DeletedExpired: 1}, st.Maps[0])
	require.Equal(t, ConntrackMapStats{Name: "lb4_ct_rev", Family: "ipv4", Reverse: true, Present: true, Entries: 1, TCP: 1, Scanned: 2, DeletedExpired: 1, DeletedOrphans: 1}, st.Maps[1])
	require.Equal(t, "ipv6", st.Maps[2].Family)

	for _, c := range []struct {
		field string
		cfg   ConntrackConfig
	}{
		{"Interval", ConntrackConfig{Root: root, Interval: time.Millisecond}},
		{"PerTick", ConntrackConfig{Root: root, PerTick: 1}},
		{"TCPClosing", ConntrackConfig{Root: root, Timeouts: ConntrackTimeouts{TCPClosing: -time.Second}}},
	} {
		_, err := StartConntrackGC(ctx, c.cfg)
		require.ErrorIs(t, err, ErrInvalidConntrackConfig, c.field)
		require.ErrorContains(t, err, c.field)
	}
}

// On its timer the GC idles while no map is pinned, finds the maps once
// they are, and after Close answers ErrClosed.
func TestConntrackGCIdlesUntilTheMapsArePinned(t *testing.T) {
	root := testutil.PinDir(t)
	ctx := context.Background()
	g, err := StartConntrackGC(ctx, ConntrackConfig{Root: root, Interval: 10 * time.Millisecond, Logger: quietLogger()})
	require.NoError(t, err)
	waitFor := func(what string, ok func(ConntrackStats) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			st, err := g.Stats(ctx)
			require.NoError(t, err)
			if ok(st) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%s: not within 5s", what)
	}
	waitFor("idle passes", func(st ConntrackStats) bool { return st.Idle && st.Passes >= 2 && st.Errors == 0 })
	pinCT(t, root)
	waitFor("the maps found", func(st ConntrackStats) bool { return !st.Idle && st.Maps[0].Present && st.Maps[3].Present })
	require.NoError(t, g.Close())
	require.NoError(t, g.Close())
	_, err = g.Stats(ctx)
	require.ErrorIs(t, err, ErrClosed)
	_, err = g.Tick(ctx)
	require.ErrorIs(t, err, ErrClosed)
}
