package actorlb

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

func driftOf(t *testing.T, ds []MapDrift, name string) MapDrift {
	t.Helper()
	for _, d := range ds {
		if d.Map == name {
			return d
		}
	}
	t.Fatalf("no drift reported for %s in %v", name, ds)
	return MapDrift{}
}

// A backend deleted behind the engine's back left a dangling slot that
// nothing repaired (the mirror said it was there): a reconcile writes it
// again, and a re-upsert or a new service using it needs nothing more.
func TestReconcileRewritesABackendDeletedBehindTheEnginesBack(t *testing.T) {
	e := newEngine(t, "", Config{ReconcileInterval: -1})
	ctx := ctxT(t)
	_, _, err := e.Upsert(ctx, mustService(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080"))
	require.NoError(t, err)
	want := dumpAll(t, e)
	bes, err := e.maps.Backend4.Dump()
	require.NoError(t, err)
	require.Len(t, bes, 2)
	require.NoError(t, e.maps.Backend4.Delete([]uint32{bes[0].ID}))
	// A neighbour also writes a revNAT entry actorlb never wrote.
	require.NoError(t, e.maps.RevNAT4.Update([]maps.RevNATEntry{{ID: 999, Value: maps.RevNATValue{Address: netip.MustParseAddr("10.9.9.9"), Port: 9}}}))

	ds, err := e.Reconcile(ctx)
	require.NoError(t, err)
	require.Len(t, ds, len(maps.Names))
	require.Equal(t, 1, driftOf(t, ds, maps.Backend4Name).Missing)
	require.Equal(t, 1, driftOf(t, ds, maps.RevNAT4Name).Extra)
	require.Zero(t, driftOf(t, ds, maps.Service4Name).Repairs())
	require.Equal(t, want, dumpAll(t, e), "the maps hold what the engine wrote")

	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]uint64{
		maps.Backend4Name: {"missing": 1},
		maps.RevNAT4Name:  {"extra": 1},
	}, st.DriftRepairs)
	require.NoError(t, st.LastReconcileError)
	require.False(t, st.LastReconcile.IsZero())

	// Nothing left: a second reconcile repairs nothing.
	ds, err = e.Reconcile(ctx)
	require.NoError(t, err)
	for _, d := range ds {
		require.Zero(t, d.Repairs(), d.Map)
	}
}

// The periodic reconcile repairs without being asked.
func TestReconcileIntervalRepairsWithoutBeingAsked(t *testing.T) {
	e := newEngine(t, "", Config{ReconcileInterval: 20 * time.Millisecond})
	ctx := ctxT(t)
	_, _, err := e.Upsert(ctx, mustService(t, "10.96.0.1:80", "10.0.1.1:8080"))
	require.NoError(t, err)
	want := dumpAll(t, e)
	svcs, err := e.maps.Service4.Dump()
	require.NoError(t, err)
	require.NoError(t, e.maps.Service4.Delete([]maps.ServiceKey{svcs[0].Key}))
	require.Eventually(t, func() bool {
		st, err := e.Stats(ctx)
		return err == nil && st.DriftRepairs[maps.Service4Name]["missing"] == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, want, dumpAll(t, e))
}

// A pin removed under the running engine shows in Stats at once and is
// pinned again by the next reconcile, so that a restart finds the map
// and every service.
func TestPinRemovedUnderTheEngineIsReportedAndRepinned(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	e := newEngine(t, root, Config{ReconcileInterval: -1})
	ctx := ctxT(t)
	_, _, err := e.Upsert(ctx, mustService(t, "10.96.0.1:80", "10.0.1.1:8080"))
	require.NoError(t, err)
	want := dumpAll(t, e)
	require.NoError(t, os.Remove(e.maps.Service4.PinPath()))

	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, "missing", st.Maps[0].Pin)
	require.False(t, st.Maps[0].PinOK())

	ds, err := e.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, "missing", driftOf(t, ds, maps.Service4Name).Pin)
	st, err = e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, "ok", st.Maps[0].Pin)
	require.Equal(t, uint64(1), st.DriftRepairs[maps.Service4Name]["pin"])

	require.NoError(t, e.Close())
	e2 := newEngine(t, root, Config{ReconcileInterval: -1})
	require.Equal(t, want, dumpAll(t, e2), "the restart found every service")
}
