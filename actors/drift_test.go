package actors

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

func TestDiffEntriesWritesMissingAndChangedThenDeletesExtra(t *testing.T) {
	type e struct{ k, v int }
	key := func(x e) int { return x.k }
	for _, tc := range []struct {
		name      string
		got, want []e
		writes    []e
		deletes   []int
		miss, chg int
		extra     int
	}{
		{name: "equal", got: []e{{1, 1}, {2, 2}}, want: []e{{2, 2}, {1, 1}}},
		{name: "missing", got: []e{{1, 1}}, want: []e{{1, 1}, {2, 2}}, writes: []e{{2, 2}}, miss: 1},
		{name: "changed", got: []e{{1, 9}}, want: []e{{1, 1}}, writes: []e{{1, 1}}, chg: 1},
		{name: "extra", got: []e{{1, 1}, {3, 3}}, want: []e{{1, 1}}, deletes: []int{3}, extra: 1},
		{name: "repeated key in the dump counts once", got: []e{{3, 3}, {3, 3}}, deletes: []int{3}, extra: 1},
		{name: "all kinds, writes in wanted order", got: []e{{1, 9}, {4, 4}}, want: []e{{2, 2}, {1, 1}, {3, 3}},
			writes: []e{{2, 2}, {1, 1}, {3, 3}}, deletes: []int{4}, miss: 2, chg: 1, extra: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, ds, d := diffEntries(tc.got, tc.want, key)
			require.Equal(t, tc.writes, ws)
			slices.Sort(ds)
			require.Equal(t, tc.deletes, ds)
			require.Equal(t, messages.Drift{Missing: tc.miss, Changed: tc.chg, Extra: tc.extra}, d)
		})
	}
}

// openMaps opens the six maps for t: real pinned maps when privileged,
// in-memory ones otherwise.
func openMaps(t *testing.T) *maps.LBMaps {
	t.Helper()
	cfg := maps.Config{InMemory: true}
	if testutil.KernelMaps(t) {
		cfg = maps.Config{Root: testutil.PinDir(t)}
	}
	lb, err := maps.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { lb.Close() })
	return lb
}

func be(id uint32, addr string) maps.BackendEntry {
	return maps.BackendEntry{ID: id, Value: maps.BackendValue{Address: netip.MustParseAddr(addr), Port: 8080, Proto: 6}}
}

func TestReconcileRepairsEntriesChangedBehindTheOwnersBack(t *testing.T) {
	lb := openMaps(t)
	m := lb.Backend4
	mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, mr.load())
	_, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1"), be(2, "10.0.0.2"), be(3, "10.0.0.3")}, nil)
	require.NoError(t, err)

	// A neighbour deletes one, rewrites one and adds one.
	require.NoError(t, m.Delete([]uint32{1}))
	require.NoError(t, m.Update([]maps.BackendEntry{be(2, "10.9.9.9"), be(7, "10.0.0.7")}))

	d := mr.reconcile()
	require.NoError(t, d.Err)
	wantPin := maps.PinOK
	if m.PinPath() == "" {
		wantPin = maps.PinNone
	}
	require.Equal(t, messages.Drift{Map: maps.Backend4Name, Pin: wantPin, Missing: 1, Changed: 1, Extra: 1}, d)
	got, err := m.Dump()
	require.NoError(t, err)
	require.ElementsMatch(t, []maps.BackendEntry{be(1, "10.0.0.1"), be(2, "10.0.0.2"), be(3, "10.0.0.3")}, got)

	// Nothing left to repair, and the mirror still skips unchanged writes.
	require.Equal(t, 0, mr.reconcile().Repairs())
	w, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1")}, nil)
	require.NoError(t, err)
	require.Zero(t, w)
}

func TestReconcileRepinsARemovedPin(t *testing.T) {
	testutil.Privileged(t)
	lb := openMaps(t)
	mr := newSvcMirror(lb.Service4)
	require.NoError(t, mr.load())
	e := maps.ServiceEntry{Key: maps.ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 80, Proto: 6}, Value: maps.ServiceValue{Count: 1, RevNATIndex: 1}}
	_, _, err := mr.apply([]maps.ServiceEntry{e}, nil)
	require.NoError(t, err)
	require.NoError(t, os.Remove(lb.Service4.PinPath()))

	d := mr.reconcile()
	require.NoError(t, d.Err)
	require.Equal(t, maps.PinMissing, d.Pin)
	require.Equal(t, 1, d.Repairs())
	st, err := lb.Service4.CheckPin()
	require.NoError(t, err)
	require.Equal(t, maps.PinOK, st)
}

// unreadablePin is a map whose pin cannot be checked (the kernel refuses
// to open it for a passing reason) and which counts the repins asked.
type unreadablePin struct {
	maps.Map[maps.BackendEntry, uint32]
	repins int
}

var errPinUnreadable = errors.New("check pin: cannot allocate memory")

func (u *unreadablePin) CheckPin() (maps.PinState, error) { return maps.PinOK, errPinUnreadable }
func (u *unreadablePin) Repin() error                     { u.repins++; return nil }

func TestReconcileOfAPinThatCannotBeCheckedRepairsTheEntriesButNotThePin(t *testing.T) {
	lb := openMaps(t)
	m := &unreadablePin{Map: lb.Backend4}
	mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, mr.load())
	_, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1")}, nil)
	require.NoError(t, err)
	require.NoError(t, lb.Backend4.Delete([]uint32{1}))

	d := mr.reconcile()
	require.ErrorIs(t, d.Err, errPinUnreadable)
	require.Equal(t, maps.PinOK, d.Pin, "not counted as a pin repair")
	require.Zero(t, m.repins)
	require.Equal(t, 1, d.Missing, "the entries are reconciled all the same")
	got, err := lb.Backend4.Dump()
	require.NoError(t, err)
	require.Equal(t, []maps.BackendEntry{be(1, "10.0.0.1")}, got)
}
