package maps

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// holds reads m (Map.Read) and answers Read.Holds, with the dump.
func holds[E, K any](m Map[E, K], n int, has func(E) bool) (Entries[E], bool, error) {
	r, err := m.Read()
	if err != nil {
		return Entries[E]{}, false, err
	}
	return r.Entries, r.Holds(n, has), nil
}

// Holds answers true only for a map holding exactly the n entries its
// predicate accepts, read by a dump that cannot repeat a key (batch
// lookups of a kernel hash map, an in-memory map); a map read by
// iteration (NoBatch here) always answers false, and the dump comes back
// whole either way.
func TestHoldsIsTrueOnlyForExactlyTheAcceptedEntries(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		distinct bool
	}{
		{"kernel, batch lookups", Config{}, true},
		{"kernel, iterated", Config{NoBatch: true}, false},
		{"in memory", Config{InMemory: true}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.cfg.InMemory {
				testutil.Privileged(t)
			}
			m := openTest(t, tc.cfg).Service4
			var es []ServiceEntry
			for i := range 3*dumpChunk + 5 { // several batch chunks
				es = append(es, svcEntry("10.96.0.1", uint16(i+1), 0, uint32(i+1), uint16(i%60000+1)))
			}
			require.NoError(t, m.Update(es))
			held := map[ServiceEntry]bool{}
			for _, e := range es {
				held[e] = true
			}
			has := func(e ServiceEntry) bool { return held[e] }

			got, ok, err := holds(m, len(es), has)
			require.NoError(t, err)
			require.Equal(t, tc.distinct, ok)
			require.Equal(t, sortServices(slices.Clone(es)), sortServices(got.Slice()), "the dump comes back")

			_, ok, err = holds(m, len(es)+1, has)
			require.NoError(t, err)
			require.False(t, ok, "one entry more wanted than held")
			_, ok, err = holds(m, len(es)-1, has)
			require.NoError(t, err)
			require.False(t, ok, "one entry more held than wanted")

			delete(held, es[len(es)/2])
			_, ok, err = holds(m, len(es), has)
			require.NoError(t, err)
			require.False(t, ok, "an entry the predicate refuses")
			held[es[len(es)/2]] = true

			changed := es[7]
			changed.Value.BackendID += 1000
			require.NoError(t, m.Update([]ServiceEntry{changed}))
			_, ok, err = holds(m, len(es), has)
			require.NoError(t, err)
			require.False(t, ok, "a value changed in the map")
		})
	}
}

// Two raw keys that decode to one entry key (the datapath's lookups
// find only the one with zero padding) are not the map holding that
// entry: a key written with stray bytes in its padding answers false.
func TestHoldsRefusesAKeyWrittenWithStrayPaddingBytes(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	m := openTest(t, Config{Root: root}).Service4
	e := svcEntry("10.96.0.1", 80, 0, 5, 1)
	require.NoError(t, m.Update([]ServiceEntry{e}))
	has := func(x ServiceEntry) bool { return x == e }
	_, ok, err := holds(m, 1, has)
	require.NoError(t, err)
	require.True(t, ok)

	raw, err := ebpf.LoadPinnedMap(filepath.Join(root, Service4Name), nil)
	require.NoError(t, err)
	t.Cleanup(func() { raw.Close() })
	var k, v [12]byte
	require.NoError(t, raw.NextKey(nil, &k))
	require.NoError(t, raw.Lookup(&k, &v))
	require.NoError(t, raw.Delete(&k))
	k[11] = 0x5a // the key's last padding byte
	require.NoError(t, raw.Put(&k, &v))

	got, err := m.Dump()
	require.NoError(t, err)
	require.Equal(t, []ServiceEntry{e}, got, "the stray key decodes as the entry")
	_, ok, err = holds(m, 1, has)
	require.NoError(t, err)
	require.False(t, ok)
}

// An IPv6 map answers as an IPv4 one.
func TestHoldsReadsIPv6Entries(t *testing.T) {
	m := openTest(t, Config{InMemory: !testutil.KernelMaps(t)}).Backend6
	es := []BackendEntry{
		{ID: 1, Value: BackendValue{Address: netip.MustParseAddr("2001:2::1"), Port: 80, Proto: 6}},
		{ID: 2, Value: BackendValue{Address: netip.MustParseAddr("2001:2::2"), Port: 80, Proto: 6}},
	}
	require.NoError(t, m.Update(es))
	_, ok, err := holds(m, 2, func(e BackendEntry) bool { return e == es[0] || e == es[1] })
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = holds(m, 2, func(e BackendEntry) bool { return e == es[0] })
	require.NoError(t, err)
	require.False(t, ok)
}
