package maps

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// openTest opens maps for tb: pinned under a fresh bpffs directory unless
// cfg.InMemory. They are closed when tb ends.
func openTest(tb testing.TB, cfg Config) *LBMaps {
	tb.Helper()
	if !cfg.InMemory && cfg.Root == "" {
		cfg.Root = testutil.PinDir(tb)
	}
	lb, err := Open(cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { lb.Close() })
	return lb
}

func svcEntry(vip string, port, slot uint16, backend uint32, id uint16) ServiceEntry {
	return ServiceEntry{
		Key:   ServiceKey{Address: netip.MustParseAddr(vip), Port: port, Slot: slot, Proto: 6},
		Value: ServiceValue{BackendID: backend, RevNATIndex: id},
	}
}

func sortServices(es []ServiceEntry) []ServiceEntry {
	slices.SortFunc(es, func(a, b ServiceEntry) int {
		return cmp.Or(a.Key.Address.Compare(b.Key.Address), cmp.Compare(a.Key.Port, b.Key.Port),
			cmp.Compare(a.Key.Proto, b.Key.Proto), cmp.Compare(a.Key.Scope, b.Key.Scope), cmp.Compare(a.Key.Slot, b.Key.Slot))
	})
	return es
}

func sortBackends(es []BackendEntry) []BackendEntry {
	slices.SortFunc(es, func(a, b BackendEntry) int { return cmp.Compare(a.ID, b.ID) })
	return es
}

func TestOpenCreatesPinnedMaps(t *testing.T) {
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root, MaxEntries: Sizes{Services: 128, Backends: 256, RevNAT: 64}})
	require.ElementsMatch(t, Names, lb.Created)
	for _, n := range Names {
		m, err := ebpf.LoadPinnedMap(filepath.Join(root, n), nil)
		require.NoError(t, err, n)
		info, err := m.Info()
		require.NoError(t, err)
		require.Equal(t, n[:min(len(n), 15)], info.Name, "kernel name (the kernel keeps 15 characters)")
		if n == Maglev4Name || n == Maglev6Name {
			require.Equal(t, ebpf.HashOfMaps, m.Type(), n)
			m.Close()
			continue
		}
		if n == SourceRange4Name || n == SourceRange6Name {
			require.Equal(t, ebpf.LPMTrie, m.Type(), n)
		} else {
			require.Equal(t, ebpf.Hash, m.Type())
		}
		_, hasBTF := info.BTFID()
		require.True(t, hasBTF, "%s has BTF", n)
		m.Close()
	}
	require.Equal(t, 128, lb.Service4.MaxEntries())
	require.Equal(t, 256, lb.Backend6.MaxEntries())
	require.Equal(t, 64, lb.RevNAT4.MaxEntries())
}

func TestPinCloseReopenKeepsEntries(t *testing.T) {
	root := testutil.PinDir(t)
	lb, err := Open(Config{Root: root})
	require.NoError(t, err)
	svc := []ServiceEntry{svcEntry("10.96.0.10", 80, 0, 0, 7), svcEntry("10.96.0.10", 80, 1, 258, 7)}
	svc[0].Value.Count = 1
	be := []BackendEntry{{ID: 258, Value: BackendValue{Address: netip.MustParseAddr("10.0.1.5"), Port: 8080, Proto: 6}}}
	be6 := []BackendEntry{{ID: 259, Value: BackendValue{Address: netip.MustParseAddr("fd00::1:5"), Port: 8443, Proto: 6, State: 1}}}
	rn := []RevNATEntry{{ID: 7, Value: RevNATValue{Address: netip.MustParseAddr("10.96.0.10"), Port: 80}}}
	require.NoError(t, lb.Service4.Update(svc))
	require.NoError(t, lb.Backend4.Update(be))
	require.NoError(t, lb.Backend6.Update(be6))
	require.NoError(t, lb.RevNAT4.Update(rn))
	require.NoError(t, lb.Close())

	lb = openTest(t, Config{Root: root})
	require.Empty(t, lb.Created, "every map was found pinned")
	gotSvc, err := lb.Service4.Dump()
	require.NoError(t, err)
	require.Equal(t, svc, sortServices(gotSvc))
	gotBe, err := lb.Backend4.Dump()
	require.NoError(t, err)
	require.Equal(t, be, gotBe)
	gotBe6, err := lb.Backend6.Dump()
	require.NoError(t, err)
	require.Equal(t, be6, gotBe6)
	gotRn, err := lb.RevNAT4.Dump()
	require.NoError(t, err)
	require.Equal(t, rn, gotRn)
	e, ok, err := lb.RevNAT4.Lookup(7)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rn[0], e)
	_, ok, err = lb.RevNAT4.Lookup(8)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestIncompatiblePinnedMapRefused(t *testing.T) {
	root := testutil.PinDir(t)
	// A map where lb4_services should be, with a 16-byte value.
	odd, err := ebpf.NewMap(&ebpf.MapSpec{Name: Service4Name, Type: ebpf.Hash, KeySize: 12, ValueSize: 16, MaxEntries: 16})
	require.NoError(t, err)
	path := filepath.Join(root, Service4Name)
	require.NoError(t, odd.Pin(path))
	odd.Close()

	_, err = Open(Config{Root: root})
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, fmt.Sprintf("open lb4_services: pinned map incompatible: %s has value size 16, want 12 (remove it with 'rm %s' or pass --recreate-maps", path, path))

	// Nothing was replaced by the refused open.
	m, err := ebpf.LoadPinnedMap(path, nil)
	require.NoError(t, err)
	require.Equal(t, uint32(16), m.ValueSize())
	m.Close()

	// Recreate replaces it (its entries lost). (Another capacity alone is
	// not incompatible: TestOpenWithAnotherSizeMigratesTheEntries.)
	lb := openTest(t, Config{Root: root, Recreate: true})
	require.Contains(t, lb.Created, Service4Name)
}

func TestMapFull(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  Config
	}{{"batch", Config{}}, {"per-element", Config{NoBatch: true}}, {"in-memory", Config{InMemory: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			cfg := mode.cfg
			cfg.MaxEntries = Sizes{Backends: 4}
			lb := openTest(t, cfg)
			var es []BackendEntry
			for i := range 6 {
				es = append(es, BackendEntry{ID: uint32(i + 1), Value: BackendValue{Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Port: 80, Proto: 6}})
			}
			err := lb.Backend4.Update(es)
			require.ErrorIs(t, err, ErrMapFull)
			require.EqualError(t, err, "update lb4_backends: map full after 4 of 6 entries (all its 4 entries are in use: raise its size, agent --map-max, library Config.MaxEntries)")
			got, err := lb.Backend4.Dump()
			require.NoError(t, err)
			require.Equal(t, es[:4], sortBackends(got), "the entries before the full condition are written")
			// Overwriting an existing key in a full map works.
			es[0].Value.State = 1
			require.NoError(t, lb.Backend4.Update(es[:1]))
		})
	}
}

func TestDeleteMissingIsNotAnError(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  Config
	}{{"batch", Config{}}, {"per-element", Config{NoBatch: true}}, {"in-memory", Config{InMemory: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			lb := openTest(t, mode.cfg)
			rn := []RevNATEntry{
				{ID: 1, Value: RevNATValue{Address: netip.MustParseAddr("10.0.0.1"), Port: 1}},
				{ID: 3, Value: RevNATValue{Address: netip.MustParseAddr("10.0.0.3"), Port: 3}},
				{ID: 5, Value: RevNATValue{Address: netip.MustParseAddr("10.0.0.5"), Port: 5}},
			}
			require.NoError(t, lb.RevNAT4.Update(rn))
			require.NoError(t, lb.RevNAT4.Delete([]uint16{2, 1, 4, 4, 5, 9}))
			got, err := lb.RevNAT4.Dump()
			require.NoError(t, err)
			require.Equal(t, rn[1:2], got)
			require.Equal(t, Counters{Updated: 3, Deleted: 6}, lb.RevNAT4.Counters())
		})
	}
}

func TestInvalidEntriesChangeNothing(t *testing.T) {
	lb := openTest(t, Config{})
	good := svcEntry("10.96.0.10", 80, 0, 0, 7)
	bad := svcEntry("fd00::a", 80, 1, 5, 7)
	err := lb.Service4.Update([]ServiceEntry{good, bad})
	require.ErrorIs(t, err, ErrFamily)
	require.EqualError(t, err, "update lb4_services: entry 1: address family mismatch: fd00::a is not an IPv4 address")
	got, err := lb.Service4.Dump()
	require.NoError(t, err)
	require.Empty(t, got)
	err = lb.Backend4.Update([]BackendEntry{{ID: 0, Value: BackendValue{Address: netip.MustParseAddr("10.0.0.1")}}})
	require.EqualError(t, err, "update lb4_backends: entry 0: backend ID 0 is invalid")
	require.Equal(t, Counters{}, lb.Service4.Counters())
}

// randomOps applies the same random updates and deletes to three map sets —
// batched syscalls, per-element syscalls, in memory — and requires equal
// contents after every step.
func TestBatchAndPerElementIdentical(t *testing.T) {
	rng := testutil.Rand(t)
	sets := []*LBMaps{openTest(t, Config{}), openTest(t, Config{NoBatch: true}), openTest(t, Config{InMemory: true})}
	ids := func(n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(rng.IntN(300) + 1)
		}
		return out
	}
	for step := range 60 {
		if rng.IntN(3) > 0 {
			var es []BackendEntry
			for _, id := range ids(rng.IntN(200)) {
				es = append(es, BackendEntry{ID: id, Value: BackendValue{
					Address: netip.AddrFrom16([16]byte{0xfd, 15: byte(rng.UintN(256))}), Port: uint16(rng.UintN(65535) + 1),
					Proto: 6, State: uint8(rng.UintN(4)), ClusterID: uint16(rng.UintN(300)), Zone: uint8(rng.UintN(4)),
				}})
			}
			for _, s := range sets {
				require.NoError(t, s.Backend6.Update(es), "step %d", step)
			}
		} else {
			del := ids(rng.IntN(150))
			for _, s := range sets {
				require.NoError(t, s.Backend6.Delete(del), "step %d", step)
			}
		}
		var dumps [][]BackendEntry
		for _, s := range sets {
			d, err := s.Backend6.Dump()
			require.NoError(t, err)
			dumps = append(dumps, sortBackends(d))
		}
		require.Equal(t, dumps[0], dumps[1], "batch vs per-element at step %d", step)
		require.Equal(t, dumps[0], dumps[2], "kernel vs in-memory at step %d", step)
	}
}

// fillLarge writes lb's IPv4 service map with more entries than three
// dump chunks hold, and returns them.
func fillLarge(t *testing.T, lb *LBMaps) []ServiceEntry {
	t.Helper()
	var es []ServiceEntry
	for i := range 3*dumpChunk + 17 {
		es = append(es, svcEntry("10.96.0.1", uint16(i+1), 0, 0, uint16(i%65535+1)))
	}
	require.NoError(t, lb.Service4.Update(es))
	return es
}

// A dump of a map larger than one batch chunk returns every entry once.
func TestDumpLargeMap(t *testing.T) {
	lb := openTest(t, Config{})
	es := fillLarge(t, lb)
	got, err := lb.Service4.Dump()
	require.NoError(t, err)
	require.Equal(t, es, sortServices(got))

	// DumpEntries reads the same entries, kept raw: as often as they are
	// iterated, and unchanged by writes after the dump.
	raw, err := lb.Service4.DumpEntries()
	require.NoError(t, err)
	require.Equal(t, len(es), raw.Len())
	require.NoError(t, lb.Service4.Update([]ServiceEntry{svcEntry("10.96.0.2", 1, 0, 0, 1)}))
	require.Equal(t, es, sortServices(raw.Slice()))
	require.Equal(t, es, sortServices(raw.Slice()), "a second read")
	n := 0
	for range raw.All() {
		if n++; n == dumpChunk+1 { // into the second chunk
			break
		}
	}
	require.Equal(t, dumpChunk+1, n, "All stops where the reader does")
	for _, buf := range [][]ServiceEntry{nil, make([]ServiceEntry, 10), make([]ServiceEntry, ChunkLen)} {
		var chunked []ServiceEntry
		chunks := 0
		for c := range raw.Chunks(buf) {
			require.LessOrEqual(t, len(c), ChunkLen)
			chunked = append(chunked, c...)
			chunks++
		}
		require.Equal(t, es, sortServices(chunked), "chunks into a buffer of %d", len(buf))
		require.GreaterOrEqual(t, chunks, 4, "a chunk a batch")
	}
}

// A dump lets other goroutines run after each batch lookup but the last
// (dumpYield): the owners of the largest maps no longer keep both
// processors of a two-core machine while the others wait to load theirs.
func TestADumpYieldsItsProcessorBetweenChunks(t *testing.T) {
	lb := openTest(t, Config{})
	es := fillLarge(t, lb)
	yields := 0
	old := dumpYield
	dumpYield = func() { yields++ }
	t.Cleanup(func() { dumpYield = old })
	raw, err := lb.Service4.DumpEntries()
	require.NoError(t, err)
	require.Equal(t, len(es), raw.Len())
	// A batch lookup stops at a bucket's end, so there may be more
	// lookups than full chunks; each but the last yields.
	require.GreaterOrEqual(t, yields, 3, "one yield per chunk but the last")

	empty := 0
	dumpYield = func() { empty++ }
	_, err = lb.Service6.DumpEntries()
	require.NoError(t, err)
	require.Zero(t, empty, "an empty map's one lookup has nothing after it")
}

func TestFaultInjection(t *testing.T) {
	calls := 0
	lb := openTest(t, Config{InMemory: true, Fault: func(name string, op Op, n uint64, entries int) error {
		calls++
		if name == Service4Name && op == OpUpdate && n == 2 {
			return syscall.E2BIG
		}
		return nil
	}})
	e := svcEntry("10.96.0.10", 80, 0, 0, 7)
	require.NoError(t, lb.Service4.Update([]ServiceEntry{e}))
	e2 := svcEntry("10.96.0.11", 80, 0, 0, 8)
	err := lb.Service4.Update([]ServiceEntry{e2})
	require.ErrorIs(t, err, syscall.E2BIG)
	require.EqualError(t, err, "update lb4_services: update #2: argument list too long")
	got, err := lb.Service4.Dump()
	require.NoError(t, err)
	require.Equal(t, []ServiceEntry{e}, got, "a failed call applies nothing")
	require.NoError(t, lb.Service4.Update([]ServiceEntry{e2}))
	require.Equal(t, 4, calls)
}

func TestEnsureBPFFSRefusesOtherFilesystems(t *testing.T) {
	testutil.Privileged(t)
	dir := t.TempDir() // on tmpfs or disk, not bpffs
	_, err := Open(Config{Root: dir})
	require.ErrorIs(t, err, ErrNotMounted)
	require.ErrorContains(t, err, "bpffs not mounted at "+dir)
}

// bpftool, where installed, prints the BTF field names of our maps.
func TestBpftoolShowsFieldNames(t *testing.T) {
	bpftool, err := exec.LookPath("bpftool")
	if err != nil {
		if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
			t.Fatalf("bpftool not installed (make test installs it): %v", err)
		}
		t.Skip("bpftool not installed")
	}
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root})
	require.NoError(t, lb.Service4.Update([]ServiceEntry{svcEntry("10.96.0.10", 53, 0, 0, 7)}))
	out, err := exec.Command(bpftool, "map", "dump", "pinned", filepath.Join(root, Service4Name)).CombinedOutput()
	require.NoError(t, err, string(out))
	for _, field := range []string{"address", "dport", "backend_slot", "proto", "scope", "backend_id", "count", "rev_nat_index", "flags", "qcount"} {
		require.Contains(t, string(out), `"`+field+`"`, "bpftool output:\n%s", out)
	}
	require.True(t, strings.Contains(string(out), "1792"), "rev_nat_index 7 in network order read as host u16 is 1792:\n%s", out)
}

var _ = errors.Is
var _ = rand.N[int]

// A key 0 written by someone else can be looked up and deleted.
func TestZeroKeysCanBeDeleted(t *testing.T) {
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root})
	raw, err := ebpf.LoadPinnedMap(filepath.Join(root, Backend4Name), nil)
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.Put(uint32(0), make([]byte, Backend4Size)))
	_, ok, err := lb.Backend4.Lookup(0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, lb.Backend4.Delete([]uint32{0}))
	_, ok, err = lb.Backend4.Lookup(0)
	require.NoError(t, err)
	require.False(t, ok)
}

// Update and Delete encode into buffers the map keeps for the next call:
// whatever the sizes before (some larger than the kept buffers), a call
// writes or deletes exactly its own entries (the map equals a model after
// every call, for kernel maps, batched or not, and in memory).
func TestUpdatesAndDeletesOfEverySizeTouchExactlyTheirEntries(t *testing.T) {
	rng := testutil.Rand(t)
	for _, mode := range []struct {
		name string
		cfg  Config
	}{{"batch", Config{}}, {"per-element", Config{NoBatch: true}}, {"in-memory", Config{InMemory: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			m := openTest(t, mode.cfg).Backend4
			model := map[uint32]BackendEntry{}
			for step := range 40 {
				n := rng.IntN(300)
				if step%10 == 9 {
					n = scratchMax + 1 + rng.IntN(1000)
				}
				if rng.IntN(3) == 0 {
					ids := make([]uint32, n)
					for i := range ids {
						ids[i] = uint32(1 + rng.IntN(6000))
						delete(model, ids[i])
					}
					require.NoError(t, m.Delete(ids), "step %d", step)
				} else {
					es := make([]BackendEntry, n)
					for i := range es {
						es[i] = BackendEntry{ID: uint32(1 + rng.IntN(6000)), Value: BackendValue{
							Address: netip.AddrFrom4([4]byte{10, byte(rng.UintN(256)), byte(rng.UintN(256)), byte(rng.UintN(256))}),
							Port:    uint16(1 + rng.IntN(65535)), Proto: 6,
						}}
						model[es[i].ID] = es[i]
					}
					require.NoError(t, m.Update(es), "step %d", step)
				}
				got, err := m.Dump()
				require.NoError(t, err)
				want := make([]BackendEntry, 0, len(model))
				for _, e := range model {
					want = append(want, e)
				}
				require.Equal(t, sortBackends(want), sortBackends(got), "step %d", step)
				if sc := m.(*typedMap[BackendEntry, uint32, [4]byte, [12]byte]).scratch.Load(); sc != nil {
					require.LessOrEqual(t, cap(sc.keys), scratchMax, "step %d: a larger buffer is not kept", step)
					require.LessOrEqual(t, cap(sc.values), scratchMax, "step %d: a larger buffer is not kept", step)
				}
			}
		})
	}
}

// Callers updating one map at once each get buffers of their own: every
// write lands (and the race detector sees no shared buffer).
func TestConcurrentUpdatesOfOneMapAllLand(t *testing.T) {
	m := openTest(t, Config{}).Backend4
	const callers, per, rounds = 4, 50, 20
	errs := make(chan error, callers)
	for c := range callers {
		go func() {
			var err error
			for r := range rounds {
				es := make([]BackendEntry, per)
				for i := range es {
					id := uint32(c*per + i + 1)
					es[i] = BackendEntry{ID: id, Value: BackendValue{Address: netip.AddrFrom4([4]byte{10, byte(c), byte(r), byte(i)}), Port: 80, Proto: 6}}
				}
				if err = m.Update(es); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range callers {
		require.NoError(t, <-errs)
	}
	got, err := m.Dump()
	require.NoError(t, err)
	require.Len(t, got, callers*per)
	for _, e := range got {
		c, i := int(e.ID-1)/per, int(e.ID-1)%per
		require.Equal(t, netip.AddrFrom4([4]byte{10, byte(c), rounds - 1, byte(i)}), e.Value.Address, "backend %d holds its caller's last write", e.ID)
	}
}

// An Update of entries a map already holds allocates nothing once its
// buffers are kept (in memory, where the store itself allocates nothing
// for keys it has).
func TestUpdateReusesItsBuffers(t *testing.T) {
	m := openTest(t, Config{InMemory: true}).Backend4
	es := make([]BackendEntry, 100)
	for i := range es {
		es[i] = BackendEntry{ID: uint32(i + 1), Value: BackendValue{Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), Port: 80, Proto: 6}}
	}
	require.NoError(t, m.Update(es))
	allocs := testing.AllocsPerRun(20, func() {
		if err := m.Update(es); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}
