package packetlb

import (
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
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
