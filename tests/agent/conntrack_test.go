package agent_test

import (
	"encoding"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/conntrack"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

func ctMarshal(tb testing.TB, v encoding.BinaryMarshaler) []byte {
	tb.Helper()
	b, err := v.MarshalBinary()
	require.NoError(tb, err)
	return b
}

// The agent collects the datapath's conntrack maps pinned under its
// --bpf-root on its --conntrack-gc-interval: an expired flow goes, a live
// one stays, and /metrics counts it.
func TestAgentCollectsConntrackMaps(t *testing.T) {
	root := testutil.PinDir(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: conntrack.Key4Size, ValueSize: conntrack.Entry4Size, MaxEntries: 1024})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Pin(filepath.Join(root, conntrack.Forward4Name)))
	now := conntrack.Monotonic()
	// CLOCK_MONOTONIC starts at boot: the expired flow is as old as the
	// machine's uptime allows, up to an hour, past the agent's default
	// UDP timeout with room to spare.
	expired := min(time.Hour, time.Duration(now)-time.Second)
	require.Greater(t, expired, 2*conntrack.DefaultOther, "the machine has been up %s: too short for a flow older than the default UDP timeout", time.Duration(now))
	keys := map[time.Duration][]byte{}
	for i, age := range []time.Duration{time.Second, expired} {
		k := conntrack.Key{Src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 5353, DstPort: 53, Proto: conntrack.ProtoUDP}
		e := conntrack.Entry{LastSeen: now - uint64(age), BackendID: 1, Flags: conntrack.FlagDSR, BackendAddr: netip.MustParseAddr("10.0.1.5"), BackendPort: 53}
		keys[age] = ctMarshal(t, k)
		require.NoError(t, m.Put(keys[age], ctMarshal(t, e)))
	}

	a := startAgent(t, root, "--conntrack-gc-interval", "100ms")
	want := `actorlb_conntrack_deleted_total{family="ipv4",reason="expired"} 1`
	deadline := time.Now().Add(10 * time.Second)
	var metrics string
	for time.Now().Before(deadline) {
		metrics = string(a.doString(t, http.MethodGet, "/metrics", "").body)
		if strings.Contains(metrics, want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, metrics, want)
	require.Contains(t, metrics, `actorlb_conntrack_map_present{map="lb4_ct"} 1`)
	require.Contains(t, metrics, `actorlb_conntrack_gc_idle 0`)
	v := make([]byte, conntrack.Entry4Size)
	require.NoError(t, m.Lookup(keys[time.Second], v), "the live flow stays")
	require.ErrorIs(t, m.Lookup(keys[expired], v), ebpf.ErrKeyNotExist, "the expired flow is gone")
}
