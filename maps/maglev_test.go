package maps

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

const testMaglevM = 251

func maglevTable(seed uint32) []uint32 {
	t := make([]uint32, testMaglevM)
	for i := range t {
		t[i] = seed + uint32(i%7)
	}
	return t
}

// The kernel map has upstream's layout: a hash of maps keyed by the
// service ID in network order, each inner map an array of one element
// holding the table's backend IDs in host order.
func TestMaglevMapHasTheUpstreamLayout(t *testing.T) {
	root := testutil.PinDir(t)
	lb := openTest(t, Config{Root: root, MaglevTableSize: testMaglevM})
	want := maglevTable(258)
	require.NoError(t, lb.Maglev4.Write(7, want))

	outer, err := ebpf.LoadPinnedMap(filepath.Join(root, Maglev4Name), &ebpf.LoadPinOptions{ReadOnly: true})
	require.NoError(t, err)
	defer outer.Close()
	require.Equal(t, ebpf.HashOfMaps, outer.Type())
	require.Equal(t, uint32(2), outer.KeySize())
	require.Equal(t, uint32(4), outer.ValueSize())
	var inner *ebpf.Map
	require.NoError(t, outer.Lookup([]byte{0x00, 0x07}, &inner), "key: service ID 7 in network order")
	defer inner.Close()
	require.Equal(t, ebpf.Array, inner.Type())
	require.Equal(t, uint32(1), inner.MaxEntries())
	require.Equal(t, uint32(4), inner.KeySize())
	require.Equal(t, uint32(4*testMaglevM), inner.ValueSize())
	raw, err := inner.LookupBytes(uint32(0))
	require.NoError(t, err)
	require.Equal(t, []byte{0x02, 0x01, 0x00, 0x00}, raw[:4], "backend 258 in host order")
	got := make([]uint32, testMaglevM)
	for i := range got {
		got[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	require.Equal(t, want, got)
}

// Write, Read, IDs and Delete on both implementations; a second write
// goes into the same inner map (in place).
func TestMaglevMapWriteReadDelete(t *testing.T) {
	for _, inMemory := range []bool{false, true} {
		t.Run(map[bool]string{false: "kernel", true: "memory"}[inMemory], func(t *testing.T) {
			lb := openTest(t, Config{InMemory: inMemory, MaglevTableSize: testMaglevM, MaxEntries: Sizes{RevNAT: 2}})
			m := lb.Maglev6
			require.Equal(t, uint32(testMaglevM), m.TableSize())
			buf := make([]uint32, testMaglevM)
			ok, err := m.Read(9, buf)
			require.NoError(t, err)
			require.False(t, ok)

			require.NoError(t, m.Write(9, maglevTable(1)))
			var innerID uint32
			if !inMemory {
				require.NoError(t, m.(*ebpfMaglev).outer.Lookup(MarshalRevNATKey(9), &innerID))
			}
			require.NoError(t, m.Write(9, maglevTable(5)))
			if !inMemory {
				var again uint32
				require.NoError(t, m.(*ebpfMaglev).outer.Lookup(MarshalRevNATKey(9), &again))
				require.Equal(t, innerID, again, "rewritten in its inner map")
			}
			ok, err = m.Read(9, buf)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, maglevTable(5), buf)

			require.NoError(t, m.Write(10, maglevTable(2)))
			require.ErrorIs(t, m.Write(11, maglevTable(3)), ErrMapFull)
			ids, err := m.IDs()
			require.NoError(t, err)
			slices.Sort(ids)
			require.Equal(t, []uint16{9, 10}, ids)

			require.ErrorContains(t, m.Write(12, make([]uint32, 3)), "table of 3 entries, want 251")
			require.ErrorContains(t, m.Write(0, maglevTable(1)), "service ID 0 is invalid")

			require.NoError(t, m.Delete([]uint16{9, 42}))
			ids, err = m.IDs()
			require.NoError(t, err)
			require.Equal(t, []uint16{10}, ids)
			require.Equal(t, Counters{Updated: 4, Deleted: 2}, m.Counters(), "tables written (the full and refused ones too) and deleted")
		})
	}
}

// A table new to the map waits, staged, for Flush, which adds every one
// staged since in one batch: until then the owner's Read, IDs and Delete
// see it and the outer map (what the datapath reads) does not. A table
// the map holds is written in place at once. A flush into a full map adds
// the tables up to the first refused and gives back the others; a delete
// of several tables, some missing, removes the others.
func TestMaglevStagedTablesJoinTheMapAtFlush(t *testing.T) {
	for _, inMemory := range []bool{false, true} {
		t.Run(map[bool]string{false: "kernel", true: "memory"}[inMemory], func(t *testing.T) {
			lb := openTest(t, Config{InMemory: inMemory, MaglevTableSize: testMaglevM, MaxEntries: Sizes{RevNAT: 4}})
			m := lb.Maglev4
			// inOuter reports whether the outer map holds id's table, and
			// that it is want (kernel only: the memory map has no datapath).
			inOuter := func(id uint16, want []uint32) bool {
				t.Helper()
				if inMemory {
					return true
				}
				var inner *ebpf.Map
				err := m.(*ebpfMaglev).outer.Lookup(MarshalRevNATKey(id), &inner)
				if errors.Is(err, ebpf.ErrKeyNotExist) {
					return false
				}
				require.NoError(t, err)
				defer inner.Close()
				got := make([]uint32, testMaglevM)
				require.NoError(t, inner.Lookup(uint32(0), got))
				require.Equal(t, want, got, "table %d in the outer map", id)
				return true
			}
			read := func(id uint16) []uint32 {
				t.Helper()
				buf := make([]uint32, testMaglevM)
				ok, err := m.Read(id, buf)
				require.NoError(t, err)
				if !ok {
					return nil
				}
				return buf
			}
			ids := func() []uint16 {
				t.Helper()
				out, err := m.IDs()
				require.NoError(t, err)
				slices.Sort(out)
				return out
			}

			require.NoError(t, m.Write(1, maglevTable(1)))
			require.NoError(t, m.Stage(1, maglevTable(10)))
			require.Equal(t, 0, m.Staged(), "a table the map holds is not staged")
			require.True(t, inOuter(1, maglevTable(10)), "written in place at once")

			for id := uint16(2); id <= 4; id++ {
				require.NoError(t, m.Stage(id, maglevTable(uint32(id))))
			}
			require.NoError(t, m.Stage(3, maglevTable(30)))
			require.Equal(t, 3, m.Staged(), "a staged table written again stays one")
			require.Equal(t, []uint16{1, 2, 3, 4}, ids())
			require.Equal(t, maglevTable(30), read(3))
			if !inMemory {
				require.False(t, inOuter(2, nil), "not in the outer map before Flush")
			}
			require.NoError(t, m.Delete([]uint16{4}))
			require.Equal(t, 2, m.Staged())
			require.Nil(t, read(4))

			notWritten, err := m.Flush()
			require.NoError(t, err)
			require.Empty(t, notWritten)
			require.Equal(t, 0, m.Staged())
			require.True(t, inOuter(2, maglevTable(2)))
			require.True(t, inOuter(3, maglevTable(30)))
			require.Equal(t, []uint16{1, 2, 3}, ids())

			for id := uint16(5); id <= 7; id++ {
				require.NoError(t, m.Stage(id, maglevTable(uint32(id))))
			}
			notWritten, err = m.Flush()
			require.ErrorIs(t, err, ErrMapFull)
			require.ErrorContains(t, err, "table of service 6")
			require.Equal(t, []uint16{6, 7}, notWritten)
			require.Equal(t, []uint16{1, 2, 3, 5}, ids())
			require.True(t, inOuter(5, maglevTable(5)))
			require.Nil(t, read(6))

			require.NoError(t, m.Delete([]uint16{1, 42, 2, 43, 5}))
			require.Equal(t, []uint16{3}, ids())
			if !inMemory {
				require.False(t, inOuter(1, nil))
				require.False(t, inOuter(5, nil))
			}
		})
	}
}

// A fault injected into a flush fails it whole: every staged table is
// given back and none is in the map; the next flush adds what is staged
// then.
func TestMaglevFlushFaultGivesBackEveryStagedTable(t *testing.T) {
	for _, inMemory := range []bool{false, true} {
		t.Run(map[bool]string{false: "kernel", true: "memory"}[inMemory], func(t *testing.T) {
			var failFlush atomic.Bool
			failFlush.Store(true)
			lb := openTest(t, Config{InMemory: inMemory, MaglevTableSize: testMaglevM, Fault: func(name string, op Op, _ uint64, entries int) error {
				if name == Maglev4Name && op == OpUpdate && entries > 1 && failFlush.Load() {
					return errors.New("injected")
				}
				return nil
			}})
			m := lb.Maglev4
			require.NoError(t, m.Stage(1, maglevTable(1)))
			require.NoError(t, m.Stage(2, maglevTable(2)))
			notWritten, err := m.Flush()
			require.ErrorContains(t, err, "injected")
			require.Equal(t, []uint16{1, 2}, notWritten)
			ids, err := m.IDs()
			require.NoError(t, err)
			require.Empty(t, ids)
			require.Equal(t, 0, m.Staged())

			failFlush.Store(false)
			require.NoError(t, m.Stage(2, maglevTable(2)))
			require.NoError(t, m.Stage(3, maglevTable(3)))
			notWritten, err = m.Flush()
			require.NoError(t, err)
			require.Empty(t, notWritten)
			ids, err = m.IDs()
			require.NoError(t, err)
			slices.Sort(ids)
			require.Equal(t, []uint16{2, 3}, ids)
		})
	}
}

// A pinned Maglev map keeps its tables across a reopen; one of another
// table size is refused unless Recreate; one of another capacity is
// replaced (its tables are the engine's to write again).
func TestMaglevMapReopen(t *testing.T) {
	root := testutil.PinDir(t)
	lb, err := Open(Config{Root: root, MaglevTableSize: testMaglevM})
	require.NoError(t, err)
	require.NoError(t, lb.Maglev4.Write(3, maglevTable(7)))
	require.NoError(t, lb.Close())

	lb = openTest(t, Config{Root: root, MaglevTableSize: testMaglevM})
	require.Empty(t, lb.Created)
	buf := make([]uint32, testMaglevM)
	ok, err := lb.Maglev4.Read(3, buf)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, maglevTable(7), buf)
	require.NoError(t, lb.Close())

	_, err = Open(Config{Root: root, MaglevTableSize: 509})
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, "lb4_maglev has tables of 251 entries")
	require.ErrorContains(t, err, "--recreate-maps")
	// An empty map is probed: lb6_maglev has no table, its size is still known.
	_, err = Open(Config{Root: root, MaglevTableSize: 509, Recreate: true})
	require.NoError(t, err)

	lb = openTest(t, Config{Root: root, MaglevTableSize: 509, MaxEntries: Sizes{RevNAT: 100}})
	require.Equal(t, []string{Maglev4Name, Maglev6Name}, lb.Created, "another capacity: replaced")
	require.Equal(t, 100, lb.Maglev4.MaxEntries())
}

// An empty pinned map of another table size is refused too: the kernel
// refuses an inner map of another shape, which a probe finds.
func TestMaglevMapEmptyOfAnotherSizeRefused(t *testing.T) {
	root := testutil.PinDir(t)
	lb, err := Open(Config{Root: root, MaglevTableSize: testMaglevM})
	require.NoError(t, err)
	require.NoError(t, lb.Close())
	_, err = Open(Config{Root: root, MaglevTableSize: 509})
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, "lb4_maglev has tables of another size than 509 entries")
	lb = openTest(t, Config{Root: root, MaglevTableSize: testMaglevM})
	ids, err := lb.Maglev4.IDs()
	require.NoError(t, err)
	require.Empty(t, ids, "the probe left nothing")
}

func TestMaglevTableSizeBounded(t *testing.T) {
	_, err := Open(Config{InMemory: true, MaglevTableSize: MaxMaglevTableSize + 1})
	require.ErrorContains(t, err, "invalid maglev table size 131072: must be at most 131071 (0 means 16381)")
}
