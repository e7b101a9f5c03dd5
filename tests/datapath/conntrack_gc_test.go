package datapath

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/conntrack"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// ctCount returns the entries of the conntrack map name under root.
func ctCount(t *testing.T, root, name string) int {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(root, name), nil)
	require.NoError(t, err)
	defer m.Close()
	n := 0
	k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	require.NoError(t, it.Err())
	return n
}

// The conntrack GC on the entries the real packet datapath wrote: its
// maps are found with the expected shapes, a live flow is kept with its
// reverse entry, a reverse entry whose forward entry is gone is deleted,
// and once the flows' lifetime has passed (TCP never replied: 60 s; UDP:
// 60 s) every entry goes, forward and reverse, in both families.
func TestConntrackGCCollectsTheDatapathsEntries(t *testing.T) {
	pe := newProgEnv(t)
	flows := 0
	var orphanKey []byte // a forward key of IPv4 TCP, deleted by hand below
	for _, v6 := range []bool{false, true} {
		client, vip := nsClient4, nsVIP4
		if v6 {
			client, vip = nsClient6, nsVIP6
		}
		for i, proto := range []uint8{6, 17, 6} {
			s := pktSpec{v6: v6, proto: proto, src: client, dst: vip, sport: uint16(42000 + i), dport: pe.port, payload: []byte("gc")}
			if proto == 6 {
				s.payload = nil
			}
			ret, _ := pe.run(t, build(s))
			require.Equal(t, uint32(xdpTX), ret, "v6=%v proto %d: forwarded", v6, proto)
			flows++
			if !v6 && proto == 6 && orphanKey == nil {
				k := conntrack.Key{Src: client, Dst: vip, SrcPort: s.sport, DstPort: s.dport, Proto: 6}
				b, err := k.MarshalBinary()
				require.NoError(t, err)
				orphanKey = b
			}
		}
	}
	names := []string{conntrack.Forward4Name, conntrack.Reverse4Name, conntrack.Forward6Name, conntrack.Reverse6Name}
	for _, name := range names {
		require.Equal(t, 3, ctCount(t, pe.root, name), "%s: one entry per flow (SNAT mode)", name)
	}
	// The LRU evicts a forward entry: its reverse entry is an orphan.
	m, err := ebpf.LoadPinnedMap(filepath.Join(pe.root, conntrack.Forward4Name), nil)
	require.NoError(t, err)
	require.NoError(t, m.Delete(orphanKey))
	m.Close()

	now := conntrack.Monotonic()
	clock := now + uint64(30*time.Second)
	s, err := conntrack.NewScanner(conntrack.Config{Root: pe.root, Clock: func() uint64 { return clock }})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	rep, err := s.Tick()
	require.NoError(t, err, "the datapath's maps have the shapes of SPEC17")
	require.True(t, rep.PassDone)
	require.Equal(t, 1, rep.Deleted, "30 s later only the orphan goes")
	st := s.Stats()
	require.False(t, st.Idle)
	for _, m := range st.Maps {
		require.True(t, m.Present, m.Name)
	}
	require.Equal(t, uint64(1), st.Maps[1].DeletedOrphans)
	require.Equal(t, []int{2, 2, 3, 3}, []int{ctCount(t, pe.root, names[0]), ctCount(t, pe.root, names[1]), ctCount(t, pe.root, names[2]), ctCount(t, pe.root, names[3])})
	require.Equal(t, conntrack.ProtoCounts{TCP: 1, UDP: 1}, st.Maps[0].Alive)

	clock = now + uint64(61*time.Second)
	rep, err = s.Tick()
	require.NoError(t, err)
	require.True(t, rep.PassDone)
	require.Equal(t, 2*(flows-1), rep.Deleted, "61 s later every flow expired, forward and reverse")
	for _, name := range names {
		require.Zero(t, ctCount(t, pe.root, name), name)
	}
}
