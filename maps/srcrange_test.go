package maps

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The kernel maps have the datapath's layout: LPM tries with
// BPF_F_NO_PREALLOC, keys {prefixlen = 32 + bits, rev_nat_id be16, pad,
// addr}, value 1; a lookup with a client address (prefixlen 32+32 or
// 32+128) finds the service's range.
func TestSourceRangeMapsHaveTheDatapathLayout(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root})
	require.NoError(t, lb.SourceRange4.Update([]SourceRangeKey{SourceRangeKeyOf(0x0102, netip.MustParsePrefix("10.1.0.0/16"))}))
	require.NoError(t, lb.SourceRange6.Update([]SourceRangeKey{SourceRangeKeyOf(7, netip.MustParsePrefix("fd00:1::/32"))}))

	m4, err := ebpf.LoadPinnedMap(filepath.Join(root, SourceRange4Name), &ebpf.LoadPinOptions{ReadOnly: true})
	require.NoError(t, err)
	defer m4.Close()
	require.Equal(t, ebpf.LPMTrie, m4.Type())
	require.Equal(t, uint32(SourceRange4KeySize), m4.KeySize())
	require.Equal(t, uint32(1), m4.ValueSize())
	require.Equal(t, uint32(unix.BPF_F_NO_PREALLOC), m4.Flags())
	require.Equal(t, uint32(DefaultMaxEntries), m4.MaxEntries())
	var v byte
	client := []byte{64, 0, 0, 0, 0x01, 0x02, 0, 0, 10, 1, 200, 3}
	require.NoError(t, m4.Lookup(client, &v), "a client inside the range")
	require.Equal(t, byte(1), v)
	other := []byte{64, 0, 0, 0, 0x01, 0x03, 0, 0, 10, 1, 200, 3}
	require.ErrorIs(t, m4.Lookup(other, &v), ebpf.ErrKeyNotExist, "another service")
	outside := []byte{64, 0, 0, 0, 0x01, 0x02, 0, 0, 10, 2, 0, 1}
	require.ErrorIs(t, m4.Lookup(outside, &v), ebpf.ErrKeyNotExist, "a client outside")

	m6, err := ebpf.LoadPinnedMap(filepath.Join(root, SourceRange6Name), &ebpf.LoadPinOptions{ReadOnly: true})
	require.NoError(t, err)
	defer m6.Close()
	require.Equal(t, uint32(SourceRange6KeySize), m6.KeySize())
	k6 := make([]byte, 24)
	k6[0] = 160
	k6[5] = 7
	copy(k6[8:], netip.MustParseAddr("fd00:1:2::9").AsSlice())
	require.NoError(t, m6.Lookup(k6, &v))
}

// Update, Dump and Delete on both implementations: entries are their
// keys; a key read back is the one written; invalid keys are refused
// with nothing written.
func TestSourceRangeMapUpdateDumpDelete(t *testing.T) {
	for _, inMemory := range []bool{false, true} {
		t.Run(map[bool]string{false: "kernel", true: "memory"}[inMemory], func(t *testing.T) {
			if !inMemory {
				testutil.Privileged(t)
			}
			lb := openTest(t, Config{InMemory: inMemory})
			ks := []SourceRangeKey{
				SourceRangeKeyOf(1, netip.MustParsePrefix("10.0.0.0/8")),
				SourceRangeKeyOf(1, netip.MustParsePrefix("10.1.0.0/16")),
				SourceRangeKeyOf(2, netip.MustParsePrefix("0.0.0.0/0")),
				SourceRangeKeyOf(2, netip.MustParsePrefix("192.0.2.7/32")),
			}
			require.NoError(t, lb.SourceRange4.Update(ks))
			got, err := lb.SourceRange4.Dump()
			require.NoError(t, err)
			require.ElementsMatch(t, ks, got)
			for _, k := range got {
				_, ok := k.Prefix()
				require.True(t, ok, k)
			}
			require.NoError(t, lb.SourceRange4.Delete(ks[1:3]))
			got, err = lb.SourceRange4.Dump()
			require.NoError(t, err)
			require.ElementsMatch(t, []SourceRangeKey{ks[0], ks[3]}, got)
			require.NoError(t, lb.SourceRange4.Delete(ks[1:3]), "missing keys are not an error")

			bad := SourceRangeKey{PrefixLen: 16, RevNATIndex: 1, Addr: netip.MustParseAddr("10.0.0.0")}
			require.Error(t, lb.SourceRange4.Update([]SourceRangeKey{bad}))
			require.Error(t, lb.SourceRange4.Update([]SourceRangeKey{SourceRangeKeyOf(0, netip.MustParsePrefix("10.0.0.0/8"))}), "service ID 0")
			require.Error(t, lb.SourceRange4.Update([]SourceRangeKey{SourceRangeKeyOf(3, netip.MustParsePrefix("fd00::/8"))}), "an IPv6 range in the IPv4 map")
			got, err = lb.SourceRange4.Dump()
			require.NoError(t, err)
			require.Len(t, got, 2)
		})
	}
}

// A key written with bits past its prefix (by someone else) reads back
// canonical, and deleting that form removes it: the trie matches only
// the prefix.
func TestSourceRangeDumpIsCanonical(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root})
	m, err := ebpf.LoadPinnedMap(filepath.Join(root, SourceRange4Name), nil)
	require.NoError(t, err)
	defer m.Close()
	raw := []byte{32 + 16, 0, 0, 0, 0, 5, 0, 0, 10, 1, 2, 3} // 10.1.2.3 with /16
	require.NoError(t, m.Update(raw, []byte{1}, ebpf.UpdateAny))
	got, err := lb.SourceRange4.Dump()
	require.NoError(t, err)
	want := SourceRangeKeyOf(5, netip.MustParsePrefix("10.1.0.0/16"))
	require.Equal(t, []SourceRangeKey{want}, got)
	require.NoError(t, lb.SourceRange4.Delete(got))
	got, err = lb.SourceRange4.Dump()
	require.NoError(t, err)
	require.Empty(t, got)
}

// Another capacity migrates the entries, as for the hash maps; the
// bpf/packetlb loader takes the trie whatever its capacity.
func TestSourceRangeMapResizeKeepsEntries(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root, MaxEntries: Sizes{SourceRanges: 16}})
	ks := []SourceRangeKey{SourceRangeKeyOf(1, netip.MustParsePrefix("10.0.0.0/8")), SourceRangeKeyOf(2, netip.MustParsePrefix("192.0.2.0/24"))}
	require.NoError(t, lb.SourceRange4.Update(ks))
	require.NoError(t, lb.Close())
	lb = openTest(t, Config{Root: root, MaxEntries: Sizes{SourceRanges: 64}})
	require.Equal(t, 64, lb.SourceRange4.MaxEntries())
	got, err := lb.SourceRange4.Dump()
	require.NoError(t, err)
	require.ElementsMatch(t, ks, got)
	m, err := ebpf.LoadPinnedMap(filepath.Join(root, SourceRange4Name), &ebpf.LoadPinOptions{ReadOnly: true})
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, uint32(unix.BPF_F_NO_PREALLOC), m.Flags())
}
