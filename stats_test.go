package actorlb

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/actorlb/actorlb/actors"
	"github.com/actorlb/actorlb/internal/engine"
	"github.com/actorlb/actorlb/internal/enginetest"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// mapEntries returns the entry counts Stats reports, by map name, after
// checking that Stats read no map and that each count is what the map
// holds (and what DumpMaps returns).
func mapEntries(t *testing.T, e *Engine, reads *atomic.Int64) map[string]int {
	t.Helper()
	ctx := ctxT(t)
	before := reads.Load()
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, before, reads.Load(), "Stats read a map")
	d, err := e.DumpMaps(ctx)
	require.NoError(t, err)
	dumped := map[string]int{
		maps.Service4Name: len(d.Services4), maps.Backend4Name: len(d.Backends4), maps.RevNAT4Name: len(d.RevNAT4),
		maps.Service6Name: len(d.Services6), maps.Backend6Name: len(d.Backends6), maps.RevNAT6Name: len(d.RevNAT6),
		maps.MembersName: len(d.Members), maps.AffinityMatchName: len(d.AffinityMatch),
		maps.SourceRange4Name: 0, maps.SourceRange6Name: 0,
	}
	for _, k := range d.SourceRanges {
		if k.Family() == maps.IPv6 {
			dumped[maps.SourceRange6Name]++
		} else {
			dumped[maps.SourceRange4Name]++
		}
	}
	for _, m := range []maps.MaglevMap{e.maps.Maglev4, e.maps.Maglev6} {
		ids, err := m.IDs() // not in DumpMaps: the tables are M entries each
		require.NoError(t, err)
		dumped[m.Name()] = len(ids)
	}
	got := map[string]int{}
	var names []string
	for _, m := range st.Maps {
		names = append(names, m.Name)
		got[m.Name] = m.Entries
		require.Equal(t, float64(m.Entries)/float64(m.MaxEntries), m.Fill(), m.Name)
	}
	require.Equal(t, maps.Names, names, "one MapStats per map, in the order of maps.Names")
	require.Equal(t, dumped, got, "entries reported vs entries in the maps")
	return got
}

// Stats reports each map's entries as its owner counts them, without
// reading any map: after writes, deletes, and a restart that loads the
// maps and repairs them.
func TestStatsCountsMapEntriesWithoutReadingMaps(t *testing.T) {
	var reads atomic.Int64
	hooks := enginetest.Hooks{Fault: func(_ string, op maps.Op, _ uint64, _ int) error {
		if op == maps.OpDump || op == maps.OpLookup {
			reads.Add(1)
		}
		return nil
	}}
	e := newEngine(t, "", Config{hooks: hooks})
	root := e.BPFRoot() // "" for in-memory maps
	ctx := ctxT(t)
	s4 := mustService(t, "10.96.0.10:80", "10.0.1.5:8080", "10.0.1.6:8080")
	s4.Type, s4.SourceRanges = lb.SVCTypeLoadBalancer, prefixes("10.0.0.0/8", "192.0.2.0/24") // two entries in lb4_source_range
	id4, _, err := e.Upsert(ctx, s4)
	require.NoError(t, err)
	v6 := mustService(t, "[fd00::10]:80", "[fd00::1:5]:8080")
	v6.LBAlgorithm = lb.LBAlgMaglev // a table in lb6_maglev
	_, _, err = e.Upsert(ctx, v6)
	require.NoError(t, err)
	require.NoError(t, e.RevNATAdd(ctx, 100, lb.L3n4Addr{Addr: netip.MustParseAddr("10.96.1.1"), Port: 80}))
	require.Equal(t, map[string]int{
		maps.Service4Name: 3, maps.Backend4Name: 2, maps.RevNAT4Name: 2,
		maps.Service6Name: 2, maps.Backend6Name: 1, maps.RevNAT6Name: 1,
		maps.MembersName: 0, maps.AffinityMatchName: 0,
		maps.Maglev4Name: 0, maps.Maglev6Name: 1,
		maps.SourceRange4Name: 2, maps.SourceRange6Name: 0,
	}, mapEntries(t, e, &reads))

	require.NoError(t, e.Delete(ctx, id4))
	require.Equal(t, map[string]int{
		maps.Service4Name: 0, maps.Backend4Name: 0, maps.RevNAT4Name: 1,
		maps.Service6Name: 2, maps.Backend6Name: 1, maps.RevNAT6Name: 1,
		maps.MembersName: 0, maps.AffinityMatchName: 0,
		maps.Maglev4Name: 0, maps.Maglev6Name: 1,
		maps.SourceRange4Name: 0, maps.SourceRange6Name: 0,
	}, mapEntries(t, e, &reads))
	require.NoError(t, e.Close())
	if root == "" {
		t.Skip("the restart half needs pinned kernel maps: in-memory maps do not outlive their engine (run as root)")
	}

	// A new engine counts what its owners load; restore deletes the
	// standalone revNAT entry.
	e2 := newEngine(t, root, Config{hooks: hooks})
	require.Equal(t, map[string]int{
		maps.Service4Name: 0, maps.Backend4Name: 0, maps.RevNAT4Name: 0,
		maps.Service6Name: 2, maps.Backend6Name: 1, maps.RevNAT6Name: 1,
		maps.MembersName: 0, maps.AffinityMatchName: 0,
		maps.Maglev4Name: 0, maps.Maglev6Name: 1,
		maps.SourceRange4Name: 0, maps.SourceRange6Name: 0,
	}, mapEntries(t, e2, &reads))
}

// The figures Stats returns are the caller's: changing them changes
// nothing the next call returns. Pinned kernel maps only: the repair counts
// come from a restart on the first engine's maps, which in-memory maps do
// not outlive.
func TestStatsAreTheCallersCopy(t *testing.T) {
	root := testutil.PinDir(t)
	e := newEngine(t, root, Config{})
	ctx := ctxT(t)
	require.NoError(t, e.RevNATAdd(ctx, 100, lb.L3n4Addr{Addr: netip.MustParseAddr("10.96.1.1"), Port: 80}))
	require.NoError(t, e.Close())
	e = newEngine(t, root, Config{}) // restore deletes the orphan revNAT entry
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orphan-revnat": 1}, st.Restore.RepairsByKind)
	st.Restore.RepairsByKind["orphan-revnat"] = 1000
	st.ActorRestarts["svc4"] = 1000
	again, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orphan-revnat": 1}, again.Restore.RepairsByKind)
	require.Zero(t, again.ActorRestarts["svc4"])
}

// ActorNames spells out the engine's actor names, for the façade's
// documentation: they are the engine's own.
func TestActorNamesAreTheEngines(t *testing.T) {
	require.Equal(t, append([]string{actors.SupervisorName}, engine.Children...), ActorNames)
}

// DumpMaps after Close reports ErrClosed rather than reading closed maps.
func TestDumpMapsAfterCloseFails(t *testing.T) {
	e := newEngine(t, "", Config{InMemory: true})
	require.NoError(t, e.Close())
	_, err := e.DumpMaps(ctxT(t))
	require.ErrorIs(t, err, ErrClosed)
}
