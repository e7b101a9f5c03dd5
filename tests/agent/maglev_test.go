package agent_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// --maglev-table-size sizes the tables; verify checks them from the pins
// (invariant 7) with no agent, and the next start repairs a table changed
// while no agent ran.
func TestMaglevTablesVerifiedAndRepaired(t *testing.T) {
	root := testutil.PinDir(t)
	a := startAgent(t, root, "--maglev-table-size", "251")
	r := a.cli(t, "service", "update", "--id", "3", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080,10.0.1.6:8080", "--lb-algorithm", "maglev")
	require.Equal(t, 0, r.code, r.stderr) // with the warning that the socket LB does not use it
	requireOK(t, a.cli(t, "service", "update", "--id", "4", "--frontend", "10.96.0.11:80", "--backends", "10.0.1.5:8080"))
	requireOK(t, a.bpf(t, "verify"))
	a.stop(t)

	m, err := maps.Open(maps.Config{Root: root, MaglevTableSize: 251})
	require.NoError(t, err)
	require.Equal(t, uint32(251), m.Maglev4.TableSize())
	tab := make([]uint32, 251)
	ok, err := m.Maglev4.Read(3, tab)
	require.NoError(t, err)
	require.True(t, ok, "service 3 has a table")
	ok, err = m.Maglev4.Read(4, tab)
	require.NoError(t, err)
	require.False(t, ok, "service 4 is not maglev")
	require.NoError(t, m.Maglev4.Write(3, make([]uint32, 251)))
	require.NoError(t, m.Close())

	r = a.bpf(t, "verify")
	require.Equal(t, 1, r.code, r.stdout)
	require.Equal(t, "invariant 7 (maglev-wrong) ipv4 service 3 10.96.0.10:80/TCP: 251 of the 251 entries of its table in lb4_maglev differ from its backends' table",
		strings.TrimSpace(r.stdout))

	b := startAgent(t, root, "--maglev-table-size", "251")
	require.Contains(t, b.stdout.String(), "restored 2 services, 2 backends, 0 orphan revNAT entries deleted, 1 repair (1 map write)")
	requireOK(t, b.bpf(t, "verify"))
	b.stop(t)

	// Another size needs --recreate-maps, and loses nothing.
	code, stderr := runAgentToExit(t, "--bpf-root", root, "--socket", filepath.Join(shortDir(t), "s.sock"), "--maglev-table-size", "509")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "lb4_maglev has tables of 251 entries, want 509")
	c := startAgent(t, root, "--maglev-table-size", "509", "--recreate-maps")
	require.Contains(t, c.stdout.String(), "restored 2 services, 2 backends, 0 orphan revNAT entries deleted, 1 repair (1 map write)")
	requireOK(t, c.bpf(t, "verify"))
}
