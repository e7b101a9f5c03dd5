package actors

import (
	"encoding"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/conntrack"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/cilium/ebpf"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func mustMarshal(tb testing.TB, v encoding.BinaryMarshaler) []byte {
	tb.Helper()
	b, err := v.MarshalBinary()
	require.NoError(tb, err)
	return b
}

// ctNow is the scanners' clock in these tests: CLOCK_MONOTONIC starts at
// boot, so a flow an hour old cannot be written against it on a machine
// up for minutes.
const ctNow = uint64(100 * time.Hour)

// pinForward4 pins an lb4_ct map under root holding one DSR UDP flow per
// age (against ctNow), and returns the map.
func pinForward4(tb testing.TB, root string, ages ...time.Duration) *ebpf.Map {
	tb.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: conntrack.Forward4Name, Type: ebpf.LRUHash, KeySize: conntrack.Key4Size, ValueSize: conntrack.Entry4Size, MaxEntries: 4096})
	require.NoError(tb, err)
	tb.Cleanup(func() { m.Close() })
	require.NoError(tb, m.Pin(filepath.Join(root, conntrack.Forward4Name)))
	for i, age := range ages {
		k := conntrack.Key{Src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 40000, DstPort: 53, Proto: conntrack.ProtoUDP}
		e := conntrack.Entry{LastSeen: ctNow - uint64(age), BackendID: 1, Flags: conntrack.FlagDSR, BackendAddr: netip.MustParseAddr("10.0.1.5"), BackendPort: 53}
		require.NoError(tb, m.Put(mustMarshal(tb, k), mustMarshal(tb, e)))
	}
	return m
}

func entries(tb testing.TB, m *ebpf.Map) int {
	tb.Helper()
	n := 0
	it := m.Iterate()
	k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	for it.Next(&k, &v) {
		n++
	}
	require.NoError(tb, it.Err())
	return n
}

func conntrackStats(tb testing.TB, root *actor.RootContext, pid *actor.PID) conntrack.Stats {
	tb.Helper()
	ch := make(chan conntrack.Stats, 1)
	root.Send(pid, &messages.ConntrackStats{Reply: ch})
	select {
	case st := <-ch:
		return st
	case <-time.After(5 * time.Second):
		tb.Fatal("no conntrack stats within 5s")
	}
	return conntrack.Stats{}
}

// The actor's timer runs a tick every interval: the expired flows go, the
// live one stays; a tick on demand answers its report; Stats answers the
// counters; stopping it stops the timer and closes the scanner, and
// leaves no goroutine behind.
func TestConntrackActorCollectsOnItsTimerAndStopsCleanly(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"))
	root := testutil.PinDir(t)
	m := pinForward4(t, root, time.Second, 2*time.Minute, time.Hour)
	s, err := conntrack.NewScanner(conntrack.Config{Root: root, Clock: func() uint64 { return ctNow }})
	require.NoError(t, err)
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	stopped := make(chan struct{})
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	pid, err := sys.Root.SpawnNamed(NewConntrackProps(ConntrackConfig{
		Scanner: s, Interval: 20 * time.Millisecond, Log: logrus.NewEntry(log), OnStopped: func() { close(stopped) },
	}), ConntrackName)
	require.NoError(t, err)

	deadline := time.Now().Add(5 * time.Second)
	var st conntrack.Stats
	for st = conntrackStats(t, sys.Root, pid); st.Passes < 3 && time.Now().Before(deadline); st = conntrackStats(t, sys.Root, pid) {
		time.Sleep(10 * time.Millisecond)
	}
	require.GreaterOrEqual(t, st.Passes, uint64(3), "the timer ticks again after each tick")
	require.Equal(t, 1, entries(t, m), "the two expired flows are gone, the live one stays")
	require.Equal(t, uint64(2), st.Maps[0].DeletedExpired)
	require.Equal(t, 1, st.Maps[0].Entries)
	require.False(t, st.Idle)

	ch := make(chan messages.ConntrackTickReply, 1)
	sys.Root.Send(pid, &messages.ConntrackTick{Reply: ch})
	select {
	case r := <-ch:
		require.NoError(t, r.Err)
		require.True(t, r.Report.PassDone)
		require.Equal(t, 1, r.Report.Scanned)
	case <-time.After(5 * time.Second):
		t.Fatal("no tick reply within 5s")
	}

	require.NoError(t, sys.Root.StopFuture(pid).Wait())
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the actor did not report it stopped")
	}
	ticks := s.Stats().Ticks
	time.Sleep(60 * time.Millisecond)
	require.Equal(t, ticks, s.Stats().Ticks, "no tick after the actor stopped")
}

// Without a timer (interval 0) the actor ticks only when asked; without
// pinned maps a tick idles, without error.
func TestConntrackActorWithoutTimerTicksOnDemandAndIdles(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"))
	root := testutil.PinDir(t)
	s, err := conntrack.NewScanner(conntrack.Config{Root: root})
	require.NoError(t, err)
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	pid := sys.Root.Spawn(NewConntrackProps(ConntrackConfig{Scanner: s}))
	time.Sleep(30 * time.Millisecond)
	require.Zero(t, conntrackStats(t, sys.Root, pid).Ticks)
	ch := make(chan messages.ConntrackTickReply, 1)
	sys.Root.Send(pid, &messages.ConntrackTick{Reply: ch})
	r := <-ch
	require.NoError(t, r.Err)
	require.True(t, r.Report.PassDone)
	st := conntrackStats(t, sys.Root, pid)
	require.True(t, st.Idle)
	require.Equal(t, uint64(1), st.Ticks)
	require.NoError(t, sys.Root.StopFuture(pid).Wait())
}
