package packetlb

import (
	"path/filepath"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// The loader takes the engine's Maglev table size from its pinned maps
// even when they hold no table, and refuses another size with an error
// that says what to pass.
func TestLoadChecksTheMaglevTableSizeOfEmptyMaps(t *testing.T) {
	root := testutil.PinDir(t)
	m, err := maps.Open(maps.Config{Root: root, MaglevTableSize: 251})
	require.NoError(t, err)
	defer m.Close()
	_, err = Load(root, 0)
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, "--maglev-table-size")
	p, err := Load(root, 251)
	require.NoError(t, err)
	p.Close()
	ids, err := m.Maglev(maps.IPv4).IDs()
	require.NoError(t, err)
	require.Empty(t, ids, "the probe left nothing behind")
}

// The conntrack maps take the capacity asked for, keep the pinned one when
// none is asked, and an invalid capacity is refused before anything is
// touched.
func TestConntrackMaxSizesTheConntrackMaps(t *testing.T) {
	root := testutil.PinDir(t)
	m, err := maps.Open(maps.Config{Root: root})
	require.NoError(t, err)
	defer m.Close()
	capacity := func() uint32 {
		t.Helper()
		ct, err := ebpf.LoadPinnedMap(filepath.Join(root, CT6RevName), nil)
		require.NoError(t, err)
		defer ct.Close()
		return ct.MaxEntries()
	}
	for _, c := range []struct {
		ask  int
		want uint32
	}{{0, DefaultConntrackMax}, {4096, 4096}, {0, 4096}, {8192, 8192}} {
		coll, err := load(root, 0, c.ask)
		require.NoError(t, err)
		coll.Close()
		require.Equal(t, c.want, capacity(), "asked %d", c.ask)
	}
	_, err = Attach(Config{Root: root, Devices: []string{"lo"}, ConntrackMax: 100})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "conntrack max 100: must be 1024..16777216")
}
