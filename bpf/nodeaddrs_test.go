package bpf

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// SetNodeAddresses replaces the whole set, before or after Attach; bad
// input changes nothing; Detach removes the maps.
func TestSetNodeAddressesReplacesTheSet(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	t.Cleanup(func() { Detach(root) })

	got, err := NodeAddresses(root)
	require.NoError(t, err)
	require.Empty(t, got, "no maps yet")

	require.NoError(t, SetNodeAddresses(root, addrs("192.0.2.1", "2001:db8::1", "::ffff:192.0.2.7", "192.0.2.1", "fe80::1%eth0")))
	got, err = NodeAddresses(root)
	require.NoError(t, err)
	require.Equal(t, addrs("192.0.2.1", "192.0.2.7", "2001:db8::1", "fe80::1"), got)

	for _, bad := range []struct {
		in   []netip.Addr
		want string
	}{
		{[]netip.Addr{netip.MustParseAddr("192.0.2.9"), {}}, "set node addresses: addresses[1]: invalid address (empty)"},
		{addrs("0.0.0.0"), "set node addresses: addresses[0] 0.0.0.0: the unspecified address is the surrogate frontend itself"},
		{addrs("2001:db8::2", "::"), "set node addresses: addresses[1] ::: the unspecified address"},
		{addrs("ff02::1"), "set node addresses: addresses[0] ff02::1: a multicast address is not a node address"},
	} {
		require.ErrorContains(t, SetNodeAddresses(root, bad.in), bad.want)
	}
	many := make([]netip.Addr, MaxNodeAddresses+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	}
	require.ErrorContains(t, SetNodeAddresses(root, many), "1025 IPv4 addresses: at most 1024 per family")
	got, err = NodeAddresses(root)
	require.NoError(t, err)
	require.Equal(t, addrs("192.0.2.1", "192.0.2.7", "2001:db8::1", "fe80::1"), got, "bad input changed nothing")

	// Attach keeps the set; a new set replaces it.
	openMaps(t, root, 100)
	cg := childCgroup(t)
	_, err = Attach(Config{Root: root, Cgroup: cg})
	require.NoError(t, err)
	got, err = NodeAddresses(root)
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.NoError(t, SetNodeAddresses(root, addrs("192.0.2.7", "198.51.100.1")))
	got, err = NodeAddresses(root)
	require.NoError(t, err)
	require.Equal(t, addrs("192.0.2.7", "198.51.100.1"), got)
	require.NoError(t, SetNodeAddresses(root, nil))
	got, err = NodeAddresses(root)
	require.NoError(t, err)
	require.Empty(t, got)

	require.NoError(t, Detach(root))
	require.NoFileExists(t, filepath.Join(root, NodeAddrs4Name))
	require.NoFileExists(t, filepath.Join(root, NodeAddrs6Name))
}
