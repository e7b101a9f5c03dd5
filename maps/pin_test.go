package maps

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

func TestPinRemovedUnderAnOpenMapIsSeenAndRepinned(t *testing.T) {
	lb := openTest(t, Config{})
	m := lb.Backend4
	st, err := m.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinOK, st)

	require.NoError(t, os.Remove(m.PinPath()))
	st, err = m.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinMissing, st)

	require.NoError(t, m.Repin())
	st, err = m.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinOK, st)
	// The pin is the map itself: what is written shows through it.
	require.NoError(t, m.Update([]BackendEntry{backendEntry(7, "10.0.0.7")}))
	pinned, err := ebpf.LoadPinnedMap(m.PinPath(), nil)
	require.NoError(t, err)
	defer pinned.Close()
	var v [12]byte
	require.NoError(t, pinned.Lookup(uint32(7), &v))
}

func backendEntry(id uint32, addr string) BackendEntry {
	return BackendEntry{ID: id, Value: BackendValue{Address: netip.MustParseAddr(addr), Port: 80, Proto: 6}}
}

func TestPinReplacedUnderAnOpenMapIsSeenAndRepinned(t *testing.T) {
	lb := openTest(t, Config{})
	m := lb.Service4
	path := m.PinPath()
	impostor, err := ebpf.NewMap(&ebpf.MapSpec{Name: Service4Name, Type: ebpf.Hash, KeySize: 12, ValueSize: 12, MaxEntries: 16})
	require.NoError(t, err)
	defer impostor.Close()
	require.NoError(t, os.Remove(path))
	require.NoError(t, impostor.Pin(path))

	st, err := m.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinReplaced, st)

	require.NoError(t, m.Repin())
	st, err = m.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinOK, st)
	_, err = os.Stat(path + "_repin")
	require.ErrorIs(t, err, os.ErrNotExist, "no temporary pin left behind")
}

func TestInMemoryMapsHaveNoPin(t *testing.T) {
	lb := openTest(t, Config{InMemory: true})
	st, err := lb.Service4.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinNone, st)
	require.Empty(t, lb.Service4.PinPath())
}

func TestOpenRefusesAServiceMapThatVanishedWhileItsBackendsRemain(t *testing.T) {
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root})
	require.NoError(t, lb.Backend4.Update([]BackendEntry{backendEntry(1, "10.0.0.1")}))
	require.NoError(t, lb.Close())
	require.NoError(t, os.Remove(filepath.Join(root, Service4Name)))

	_, err := Open(Config{Root: root})
	require.ErrorIs(t, err, ErrVanished)
	require.ErrorContains(t, err, "open maps: pinned map missing: lb4_services is not pinned under "+root+" while lb4_backends still hold entries that refer to it; starting would make it empty and every IPv4 service is lost")
	require.ErrorContains(t, err, "to accept the loss, pass --recreate-maps")
	_, err = os.Stat(filepath.Join(root, Service4Name))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused open creates nothing")

	// Accepting the loss opens, with the service map created empty.
	lb = openTest(t, Config{Root: root, Recreate: true})
	require.Equal(t, []string{Service4Name}, lb.Created)
}

func TestOpenRefusesABackendMapThatVanishedWhileServicesRemain(t *testing.T) {
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root})
	require.NoError(t, lb.Service6.Update([]ServiceEntry{svcEntry("2001:db8::1", 80, 0, 0, 1)}))
	require.NoError(t, lb.Close())
	require.NoError(t, os.Remove(filepath.Join(root, Backend6Name)))

	_, err := Open(Config{Root: root})
	require.ErrorIs(t, err, ErrVanished)
	require.ErrorContains(t, err, "lb6_backends is not pinned under "+root+" while lb6_services still hold entries")
	require.ErrorContains(t, err, "every IPv6 backend is lost")
}

func TestOpenAcceptsAVanishedMapWhenNothingReferredToIt(t *testing.T) {
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root})
	require.NoError(t, lb.Close())
	require.NoError(t, os.Remove(filepath.Join(root, Service4Name)))
	require.NoError(t, os.Remove(filepath.Join(root, RevNAT6Name))) // revNAT is rebuilt from services
	lb = openTest(t, Config{Root: root})
	require.ElementsMatch(t, []string{Service4Name, RevNAT6Name}, lb.Created)
}

func TestOpenWithAnotherSizeMigratesTheEntries(t *testing.T) {
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root, MaxEntries: Sizes{Backends: 8}})
	es := []BackendEntry{backendEntry(1, "10.0.0.1"), backendEntry(2, "10.0.0.2"), backendEntry(3, "10.0.0.3")}
	require.NoError(t, lb.Backend4.Update(es))
	before, err := ebpf.LoadPinnedMap(filepath.Join(root, Backend4Name), nil)
	require.NoError(t, err)
	oldID, err := mapID(before)
	require.NoError(t, err)
	before.Close()
	require.NoError(t, lb.Close())

	// Growing keeps every entry, in a new map pinned in the old one's place.
	lb = openTest(t, Config{Root: root, MaxEntries: Sizes{Backends: 32}})
	require.Equal(t, 32, lb.Backend4.MaxEntries())
	require.Empty(t, lb.Created)
	got, err := lb.Backend4.Dump()
	require.NoError(t, err)
	require.Equal(t, es, sortBackends(got))
	pinned, err := ebpf.LoadPinnedMap(filepath.Join(root, Backend4Name), nil)
	require.NoError(t, err)
	require.Equal(t, uint32(32), pinned.MaxEntries())
	newID, err := mapID(pinned)
	require.NoError(t, err)
	pinned.Close()
	require.NotEqual(t, oldID, newID)
	st, err := lb.Backend4.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinOK, st)
	require.NoError(t, lb.Close())

	// Shrinking below the entries held is refused, changing nothing.
	_, err = Open(Config{Root: root, MaxEntries: Sizes{Backends: 2}})
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, "holds 3 entries, more than the 2 asked for (ask for at least 3")
	// Shrinking to what fits works.
	lb = openTest(t, Config{Root: root, MaxEntries: Sizes{Backends: 3}})
	got, err = lb.Backend4.Dump()
	require.NoError(t, err)
	require.Equal(t, es, sortBackends(got))
}

// A pin the kernel refuses to open for a passing reason (no memory, no
// descriptor left, the descriptor closed before cilium/ebpf read its type)
// is neither missing nor replaced: its check fails and nothing is repaired.
// Missing needs the path gone, replaced needs something there that is not
// a map.
func TestPinRefusedForAPassingReasonIsNotDrift(t *testing.T) {
	lb := openTest(t, Config{})
	path := lb.SourceRange4.PinPath()
	dir := filepath.Join(filepath.Dir(path), "a_directory")
	require.NoError(t, os.Mkdir(dir, 0o700))
	readlink := fmt.Errorf("reading fd type: %w", &os.PathError{Op: "readlink", Path: "/proc/self/fd/9", Err: syscall.ENOENT})
	for _, tc := range []struct {
		name    string
		path    string
		loadErr error
		want    PinState
		wantErr bool
	}{
		{name: "no memory", path: path, loadErr: syscall.ENOMEM, wantErr: true},
		{name: "no descriptor left", path: path, loadErr: fmt.Errorf("open: %w", syscall.EMFILE), wantErr: true},
		{name: "descriptor gone before its type was read", path: path, loadErr: readlink, wantErr: true},
		{name: "nothing there", path: filepath.Join(filepath.Dir(path), "gone"), loadErr: syscall.ENOENT, want: PinMissing},
		{name: "a directory there", path: dir, loadErr: syscall.EACCES, want: PinReplaced},
		{name: "a program there", path: path, loadErr: fmt.Errorf("%s is not a Map", path), want: PinReplaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := pinStateOfRefusedLoad(tc.path, tc.loadErr)
			if tc.wantErr {
				require.ErrorIs(t, err, tc.loadErr)
				require.ErrorContains(t, err, "check pin "+tc.path)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, st)
		})
	}
	st, err := lb.SourceRange4.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinOK, st, "the pin itself was never touched")
}

func TestDirectoryInPlaceOfAPinIsReplaced(t *testing.T) {
	lb := openTest(t, Config{})
	path := lb.SourceRange6.PinPath()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Mkdir(path, 0o700))
	st, err := lb.SourceRange6.CheckPin()
	require.NoError(t, err)
	require.Equal(t, PinReplaced, st)
}
