package verify

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

func sortDump(d *table.Dump) {
	bySvc := func(a, b maps.ServiceEntry) int {
		return cmp.Or(a.Key.Address.Compare(b.Key.Address), cmp.Compare(a.Key.Port, b.Key.Port), cmp.Compare(a.Key.Slot, b.Key.Slot))
	}
	slices.SortFunc(d.Services4, bySvc)
	slices.SortFunc(d.Services6, bySvc)
	byBe := func(a, b maps.BackendEntry) int { return cmp.Compare(a.ID, b.ID) }
	slices.SortFunc(d.Backends4, byBe)
	slices.SortFunc(d.Backends6, byBe)
	byRev := func(a, b maps.RevNATEntry) int { return cmp.Compare(a.ID, b.ID) }
	slices.SortFunc(d.RevNAT4, byRev)
	slices.SortFunc(d.RevNAT6, byRev)
}

func TestDumpPinnedReadsWhatDumpReads(t *testing.T) {
	root := testutil.PinDir(t)
	m, err := maps.Open(maps.Config{Root: root, MaxEntries: maps.Sizes{Services: 64, Backends: 64, RevNAT: 64}})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })

	want := dumpOf(
		svc(t, "10.96.0.10:80", 1, "10.0.1.5:8080=1", "10.0.1.6:8080=2/quarantined"),
		svc(t, "[fd00::a]:53/udp", 2, "[fd00::1]:53/udp=3"),
	)
	// A corrupt entry must come back as it is.
	want.Backends4 = append(want.Backends4, maps.BackendEntry{ID: 9, Value: want.Backends4[0].Value})
	require.NoError(t, m.Service4.Update(want.Services4))
	require.NoError(t, m.Service6.Update(want.Services6))
	require.NoError(t, m.Backend4.Update(want.Backends4))
	require.NoError(t, m.Backend6.Update(want.Backends6))
	require.NoError(t, m.RevNAT4.Update(want.RevNAT4))
	require.NoError(t, m.RevNAT6.Update(want.RevNAT6))

	viaMaps, err := Dump(m)
	require.NoError(t, err)
	pinned, err := DumpPinned(root)
	require.NoError(t, err)
	sortDump(&want)
	sortDump(&viaMaps)
	sortDump(&pinned)
	require.Equal(t, want, viaMaps)
	require.Equal(t, want, pinned)
	require.Len(t, Check(pinned), 2) // duplicate-backend and orphan-backend for ID 9
}

func TestDumpPinnedChangesNothing(t *testing.T) {
	root := testutil.PinDir(t)
	_, err := DumpPinned(root)
	require.ErrorIs(t, err, ErrNotPinned)
	require.Contains(t, err.Error(), "actorlb agent --bpf-root "+root)
	ents, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, ents, "DumpPinned must not create maps")

	_, err = DumpPinned(filepath.Join(root, "missing"))
	require.ErrorIs(t, err, ErrNotPinned)
}

func TestDumpPinnedRefusesForeignMaps(t *testing.T) {
	root := testutil.PinDir(t)
	m, err := maps.Open(maps.Config{Root: root, MaxEntries: maps.Sizes{Services: 8, Backends: 8, RevNAT: 8}})
	require.NoError(t, err)
	require.NoError(t, m.Close())
	path := filepath.Join(root, maps.Backend6Name)
	require.NoError(t, os.Remove(path))
	foreign, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 8})
	require.NoError(t, err)
	defer foreign.Close()
	require.NoError(t, foreign.Pin(path))

	_, err = DumpPinned(root)
	require.ErrorIs(t, err, maps.ErrIncompatible)
	require.Contains(t, err.Error(), "lb6_backends is a Hash map with key size 4 and value size 8, want a hash map with 4 and 24")
}
