package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// --conntrack-gc-interval: 10s by default, 0 turns the GC off, anything
// else under 100ms is refused naming the flag.
func TestConntrackGCIntervalFlag(t *testing.T) {
	c, err := parsedAgent(t)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, c.conntrackGC)
	c, err = parsedAgent(t, "--conntrack-gc-interval", "0")
	require.NoError(t, err)
	require.Zero(t, c.conntrackGC)
	for _, bad := range []string{"50ms", "-1s"} {
		_, err = parsedAgent(t, "--conntrack-gc-interval", bad)
		require.ErrorContains(t, err, "invalid --conntrack-gc-interval", bad)
	}
}

// The collector exports the GC's figures under the names the README
// gives, lint-clean: idle without maps, then the maps present.
func TestConntrackMetrics(t *testing.T) {
	root := testutil.PinDir(t)
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	gc, err := actorlb.StartConntrackGC(context.Background(), actorlb.ConntrackConfig{Root: root, Interval: -1, Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { gc.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&conntrackCollector{gc: gc, timeout: 5 * time.Second})

	_, err = gc.Tick(context.Background())
	require.NoError(t, err)
	require.NoError(t, promtest.GatherAndCompare(reg, strings.NewReader(`
# HELP actorlb_conntrack_gc_idle 1 when no conntrack map is pinned and the GC idles.
# TYPE actorlb_conntrack_gc_idle gauge
actorlb_conntrack_gc_idle 1
# HELP actorlb_conntrack_gc_passes_total Complete GC passes over the conntrack maps.
# TYPE actorlb_conntrack_gc_passes_total counter
actorlb_conntrack_gc_passes_total 1
`), "actorlb_conntrack_gc_idle", "actorlb_conntrack_gc_passes_total"))

	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 16, ValueSize: 48, MaxEntries: 16})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.NoError(t, m.Pin(filepath.Join(root, "lb4_ct")))
	_, err = gc.Tick(context.Background())
	require.NoError(t, err)
	require.NoError(t, promtest.GatherAndCompare(reg, strings.NewReader(`
# HELP actorlb_conntrack_map_present 1 when the conntrack map is pinned with the expected shape (the packet datapath is attached), 0 otherwise.
# TYPE actorlb_conntrack_map_present gauge
actorlb_conntrack_map_present{map="lb4_ct"} 1
actorlb_conntrack_map_present{map="lb4_ct_rev"} 0
actorlb_conntrack_map_present{map="lb6_ct"} 0
actorlb_conntrack_map_present{map="lb6_ct_rev"} 0
# HELP actorlb_conntrack_deleted_total Conntrack entries deleted by the GC, by reason: expired (the flow's lifetime passed; forward entry and its reverse partner) or orphan (a reverse entry whose forward entry is gone).
# TYPE actorlb_conntrack_deleted_total counter
actorlb_conntrack_deleted_total{family="ipv4",reason="expired"} 0
actorlb_conntrack_deleted_total{family="ipv4",reason="orphan"} 0
actorlb_conntrack_deleted_total{family="ipv6",reason="expired"} 0
actorlb_conntrack_deleted_total{family="ipv6",reason="orphan"} 0
`), "actorlb_conntrack_map_present", "actorlb_conntrack_deleted_total"))
	n, err := promtest.GatherAndCount(reg, "actorlb_conntrack_entries", "actorlb_conntrack_flows")
	require.NoError(t, err)
	require.Equal(t, 4+6, n, "one entries series per map, one flows series per family and protocol")
	problems, err := promtest.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
