package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The object's maps have the names and shapes of the maps package's, so the
// pinned maps can stand in for them.
func TestObjectMatchesMapLayouts(t *testing.T) {
	spec, err := loadSocklb()
	require.NoError(t, err)
	want := map[string][2]uint32{
		maps.Service4Name: {maps.Service4KeySize, maps.ServiceValueSize},
		maps.Service6Name: {maps.Service6KeySize, maps.ServiceValueSize},
		maps.Backend4Name: {maps.BackendKeySize, maps.Backend4Size},
		maps.Backend6Name: {maps.BackendKeySize, maps.Backend6Size},
		maps.RevNAT4Name:  {maps.RevNATKeySize, maps.RevNAT4Size},
		maps.RevNAT6Name:  {maps.RevNATKeySize, maps.RevNAT6Size},
	}
	for name := range want {
		require.Contains(t, maps.Names, name)
	}
	for name := range want {
		ms := spec.Maps[name]
		require.NotNil(t, ms, "map %s missing from the object", name)
		require.Equal(t, ebpf.Hash, ms.Type, name)
		require.Equal(t, want[name], [2]uint32{ms.KeySize, ms.ValueSize}, name)
		require.Zero(t, ms.Flags, name)
	}
	for name, size := range map[string][2]uint32{ReverseSK4Name: {16, 8}, ReverseSK6Name: {32, 20}} {
		ms := spec.Maps[name]
		require.NotNil(t, ms, name)
		require.Equal(t, ebpf.LRUHash, ms.Type, name)
		require.Equal(t, size, [2]uint32{ms.KeySize, ms.ValueSize}, name)
	}
	for name, key := range map[string]uint32{NodeAddrs4Name: 4, NodeAddrs6Name: 16} {
		ms := spec.Maps[name]
		require.NotNil(t, ms, name)
		require.Equal(t, ebpf.Hash, ms.Type, name)
		require.Equal(t, [2]uint32{key, 1}, [2]uint32{ms.KeySize, ms.ValueSize}, name)
		require.EqualValues(t, MaxNodeAddresses, ms.MaxEntries, name)
	}
	// The weight and affinity maps: the engine's two (maps.Open creates
	// them, the loader hands them in) and the datapath's own LRU maps.
	for name, shape := range map[string]struct {
		typ       ebpf.MapType
		key, size uint32
		own       bool
	}{
		maps.MembersName:       {ebpf.Hash, maps.MemberKeySize, maps.MemberValueSize, false},
		maps.AffinityMatchName: {ebpf.Hash, maps.AffinityMatchKeySize, maps.AffinityMatchValSize, false},
		Affinity4Name:          {ebpf.LRUHash, 16, 16, true},
		Affinity6Name:          {ebpf.LRUHash, 24, 16, true},
	} {
		ms := spec.Maps[name]
		require.NotNil(t, ms, name)
		if shape.own {
			require.Contains(t, ownMapNames, name, "the loader creates the datapath's own map")
		} else {
			require.Contains(t, lbMapNames, name, "the loader hands the pinned map in")
		}
		require.Equal(t, shape.typ, ms.Type, name)
		require.Equal(t, [2]uint32{shape.key, shape.size}, [2]uint32{ms.KeySize, ms.ValueSize}, name)
		require.Zero(t, ms.Flags, name)
	}
	for _, name := range maps.Names {
		require.Contains(t, lbMapNames, name, "every map of the maps package is known to the loader")
	}
	require.Len(t, spec.Maps, 14)
	require.Len(t, spec.Programs, len(Hooks))
	for _, h := range Hooks {
		ps := spec.Programs[h.Program]
		require.NotNil(t, ps, h.Program)
		require.Equal(t, ebpf.CGroupSockAddr, ps.Type, h.Program)
		require.Equal(t, h.Attach, ps.AttachType, h.Program)
		require.Equal(t, "cgroup/"+h.Name, ps.SectionName, h.Program)
	}
}

func TestUnescapeMountPath(t *testing.T) {
	require.Equal(t, "/sys/fs/cgroup", unescapeMountPath("/sys/fs/cgroup"))
	require.Equal(t, "/mnt/a b\tc", unescapeMountPath(`/mnt/a\040b\011c`))
	require.Equal(t, `/x\y`, unescapeMountPath(`/x\y`))
}

// childCgroup makes a fresh cgroup v2 directory, removed when tb ends.
func childCgroup(tb testing.TB) string {
	tb.Helper()
	testutil.Privileged(tb)
	mnt, err := CgroupV2Mount()
	if err != nil {
		if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
			tb.Fatalf("no cgroup v2: %v", err)
		}
		tb.Skipf("no cgroup v2: %v", err)
	}
	dir, err := os.MkdirTemp(mnt, "actorlb-test-")
	require.NoError(tb, err)
	tb.Cleanup(func() { removeCgroup(tb, dir) })
	return dir
}

func removeCgroup(tb testing.TB, dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			tb.Errorf("remove cgroup %s: %v", dir, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func openMaps(tb testing.TB, root string, max int) *maps.LBMaps {
	tb.Helper()
	lbm, err := maps.Open(maps.Config{Root: root, MaxEntries: maps.Sizes{Services: max, Backends: max, RevNAT: max}})
	require.NoError(tb, err)
	tb.Cleanup(func() { lbm.Close() })
	return lbm
}

func mapID(tb testing.TB, path string) ebpf.MapID {
	tb.Helper()
	m, err := ebpf.LoadPinnedMap(path, nil)
	require.NoError(tb, err)
	defer m.Close()
	mi, err := m.Info()
	require.NoError(tb, err)
	id, ok := mi.ID()
	require.True(tb, ok)
	return id
}

func programMapIDs(tb testing.TB, id ebpf.ProgramID) []ebpf.MapID {
	tb.Helper()
	p, err := ebpf.NewProgramFromID(id)
	require.NoError(tb, err)
	defer p.Close()
	pi, err := p.Info()
	require.NoError(tb, err)
	ids, ok := pi.MapIDs()
	require.True(tb, ok)
	return ids
}

func changes(info Info) []string {
	var out []string
	for _, h := range info.Hooks {
		out = append(out, h.Change)
	}
	return slices.Compact(out)
}

func TestAttachUpdateMoveDetach(t *testing.T) {
	root := testutil.PinDir(t)
	cg1, cg2 := childCgroup(t), childCgroup(t)
	openMaps(t, root, 1000)
	t.Cleanup(func() { Detach(root) })

	info, err := Attach(Config{Root: root, Cgroup: cg1})
	require.NoError(t, err)
	require.True(t, info.Attached(), info.String())
	require.Equal(t, []string{"created"}, changes(info))
	require.Equal(t, cg1, info.Cgroup())
	id1, err := CgroupID(cg1)
	require.NoError(t, err)
	for _, h := range info.Hooks {
		require.Equal(t, id1, h.CgroupID, h.Name)
		require.Equal(t, h.Program, h.ProgramName, h.Name)
		require.FileExists(t, filepath.Join(root, LinksDir, "socklb_"+h.Name))
	}
	require.Contains(t, info.String(), "socket LB: attached to "+cg1+" (8 hooks; links pinned in "+root+"/links)")

	// The programs read the pinned maps themselves, not copies.
	connect4 := info.Hooks[0]
	require.Equal(t, "connect4", connect4.Name)
	used := programMapIDs(t, connect4.ProgramID)
	for _, name := range []string{maps.Service4Name, maps.Backend4Name, ReverseSK4Name} {
		require.Contains(t, used, mapID(t, filepath.Join(root, name)), name)
	}
	recv6 := info.Hooks[6]
	require.Equal(t, "recvmsg6", recv6.Name)
	used = programMapIDs(t, recv6.ProgramID)
	for _, name := range []string{maps.RevNAT6Name, ReverseSK6Name, maps.RevNAT4Name, ReverseSK4Name} {
		require.Contains(t, used, mapID(t, filepath.Join(root, name)), name)
	}
	rev4 := mapID(t, filepath.Join(root, ReverseSK4Name))

	// Again: same links, new programs, same reverse maps.
	again, err := Attach(Config{Root: root, Cgroup: cg1})
	require.NoError(t, err)
	require.True(t, again.Attached())
	require.Equal(t, []string{"updated"}, changes(again))
	for i, h := range again.Hooks {
		require.Equal(t, info.Hooks[i].LinkID, h.LinkID, h.Name)
		require.NotEqual(t, info.Hooks[i].ProgramID, h.ProgramID, h.Name)
	}
	require.Equal(t, rev4, mapID(t, filepath.Join(root, ReverseSK4Name)))
	// The old programs are gone with their last reference.
	_, err = ebpf.NewProgramFromID(info.Hooks[0].ProgramID)
	require.ErrorIs(t, err, os.ErrNotExist)

	// Another cgroup: new links there, none left on the first.
	moved, err := Attach(Config{Root: root, Cgroup: cg2})
	require.NoError(t, err)
	require.True(t, moved.Attached())
	require.Equal(t, []string{"moved"}, changes(moved))
	require.Equal(t, cg2, moved.Cgroup())
	requireNoPrograms(t, cg1)
	requirePrograms(t, cg2, len(Hooks))

	require.NoError(t, Detach(root))
	requireNoPrograms(t, cg2)
	st, err := Status(root)
	require.NoError(t, err)
	require.False(t, st.Attached())
	require.Equal(t, "socket LB: not attached (no links pinned in "+root+"/links)", st.Summary())
	require.NoFileExists(t, filepath.Join(root, ReverseSK4Name))
	require.NoDirExists(t, filepath.Join(root, LinksDir))
	// The LB maps stay.
	require.FileExists(t, filepath.Join(root, maps.Service4Name))
	require.NoError(t, Detach(root), "detaching nothing is fine")
}

// requirePrograms checks how many programs are attached directly to cg
// at the connect4 hook... and at every other hook.
func requirePrograms(t *testing.T, cg string, want int) {
	t.Helper()
	n := 0
	for _, h := range Hooks {
		ids := attachedPrograms(t, cg, h.Attach)
		n += len(ids)
	}
	require.Equal(t, want, n, "programs attached to %s", cg)
}

func requireNoPrograms(t *testing.T, cg string) { requirePrograms(t, cg, 0) }

func attachedPrograms(t *testing.T, cg string, at ebpf.AttachType) []uint32 {
	t.Helper()
	f, err := os.Open(cg)
	require.NoError(t, err)
	defer f.Close()
	ids, err := queryPrograms(int(f.Fd()), at)
	require.NoError(t, err)
	return ids
}

func TestAttachErrors(t *testing.T) {
	root := testutil.PinDir(t)
	cg := childCgroup(t)

	_, err := Attach(Config{Root: root, Cgroup: cg})
	require.ErrorIs(t, err, ErrMapsNotPinned)
	require.ErrorContains(t, err, "attach socket lb: lb maps not pinned: "+root+"/lb4_services is missing")

	openMaps(t, root, 100)
	_, err = Attach(Config{Root: root, Cgroup: t.TempDir()})
	require.ErrorIs(t, err, ErrNotCgroup2)

	// A pinned map of another shape is refused, naming it.
	require.NoError(t, os.Remove(filepath.Join(root, maps.Backend6Name)))
	bad, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 10})
	require.NoError(t, err)
	defer bad.Close()
	require.NoError(t, bad.Pin(filepath.Join(root, maps.Backend6Name)))
	_, err = Attach(Config{Root: root, Cgroup: cg})
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, root+"/lb6_backends: ValueSize: 8 changed to 24")
	st, err := Status(root)
	require.NoError(t, err)
	require.False(t, st.Attached())
}

// A reverse map of an outdated shape is replaced; one of the right shape is
// kept (with its entries).
func TestReverseMapsReplacedWhenOutdated(t *testing.T) {
	root := testutil.PinDir(t)
	cg := childCgroup(t)
	openMaps(t, root, 100)
	t.Cleanup(func() { Detach(root) })
	old, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 12, ValueSize: 8, MaxEntries: 10})
	require.NoError(t, err)
	require.NoError(t, old.Pin(filepath.Join(root, ReverseSK4Name)))
	oldInfo, err := old.Info()
	require.NoError(t, err)
	oldID, _ := oldInfo.ID()
	old.Close()

	_, err = Attach(Config{Root: root, Cgroup: cg})
	require.NoError(t, err)
	id := mapID(t, filepath.Join(root, ReverseSK4Name))
	require.NotEqual(t, oldID, id)
	require.NoFileExists(t, filepath.Join(root, ReverseSK4Name+"_replacing"))
	_, err = Attach(Config{Root: root, Cgroup: cg})
	require.NoError(t, err)
	require.Equal(t, id, mapID(t, filepath.Join(root, ReverseSK4Name)))
}

// Status reports a link whose cgroup was removed, and programs that read
// maps no longer pinned.
func TestStatusDefunctAndStale(t *testing.T) {
	root := testutil.PinDir(t)
	mnt, err := CgroupV2Mount()
	require.NoError(t, err)
	cg, err := os.MkdirTemp(mnt, "actorlb-test-")
	require.NoError(t, err)
	t.Cleanup(func() { removeCgroup(t, cg) })
	lbm := openMaps(t, root, 100)
	t.Cleanup(func() { Detach(root) })
	_, err = Attach(Config{Root: root, Cgroup: cg})
	require.NoError(t, err)

	// Replace a pinned map, as --recreate-maps would.
	lbm.Close()
	require.NoError(t, os.Remove(filepath.Join(root, maps.Service4Name)))
	openMaps(t, root, 100)
	st, err := Status(root)
	require.NoError(t, err)
	require.False(t, st.Attached())
	require.Equal(t, fmt.Sprintf("socket LB: attached to %s, but reading maps that are no longer pinned: lb4_services (restart the agent to reattach)", cg), st.Summary())
	require.Equal(t, []string{maps.Service4Name}, st.Hooks[0].StaleMaps)
	require.Empty(t, st.Hooks[2].StaleMaps, "recvmsg4 does not read the service map")
	st, err = Attach(Config{Root: root, Cgroup: cg})
	require.NoError(t, err)
	require.True(t, st.Attached(), st.String())

	removeCgroup(t, cg)
	// The kernel releases a removed cgroup's programs asynchronously.
	require.Eventually(t, func() bool {
		st, err = Status(root)
		require.NoError(t, err)
		return st.Hooks[0].CgroupID == 0
	}, 5*time.Second, 20*time.Millisecond)
	require.False(t, st.Attached())
	require.True(t, strings.HasPrefix(st.Summary(), "socket LB: detached: the cgroup of the links"), st.Summary())
	require.Contains(t, st.String(), "(cgroup removed)")

	// Attaching again moves the links to a live cgroup.
	cg2 := childCgroup(t)
	st, err = Attach(Config{Root: root, Cgroup: cg2})
	require.NoError(t, err)
	require.True(t, st.Attached())
	require.Equal(t, []string{"moved"}, changes(st))
}

func TestCgroupIDAndPath(t *testing.T) {
	cg := childCgroup(t)
	id, err := CgroupID(cg)
	require.NoError(t, err)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(cg, &st))
	require.Equal(t, st.Ino, id, "on cgroup2 the ID is the inode number")
	require.Equal(t, cg, cgroupPath(id))
	mnt, err := CgroupV2Mount()
	require.NoError(t, err)
	require.Equal(t, cg, walkForCgroup(mnt, id))
	require.Equal(t, "", cgroupPath(0))
}

func queryPrograms(fd int, at ebpf.AttachType) ([]uint32, error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: at})
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, p := range res.Programs {
		ids = append(ids, uint32(p.ID))
	}
	return ids, nil
}
