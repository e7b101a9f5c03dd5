package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Names of the Maglev families (upstream's layout): per service, its
// Maglev lookup table.
const (
	Maglev4Name = "lb4_maglev"
	Maglev6Name = "lb6_maglev"
)

// DefaultMaglevTableSize is the entries of a Maglev table (M) unless
// Config.MaglevTableSize says otherwise: internal/maglev's default.
const DefaultMaglevTableSize = 16381

// MaxMaglevTableSize bounds Config.MaglevTableSize here (internal/maglev
// checks that it is a prime it accepts).
const MaxMaglevTableSize = 131071

// MaglevMap is lb4_maglev or lb6_maglev: BPF_MAP_TYPE_HASH_OF_MAPS keyed by
// the service ID (u16 rev_nat_index, network order) whose value is an inner
// BPF_MAP_TYPE_ARRAY of one element (key u32 0) holding the service's table,
// u32 backend_ids[M] in host order. Every table of a map has M entries.
//
// A table is written whole (one update of the inner array's only value):
// into the service's inner map when it has one, so a datapath reading it
// meanwhile may see some entries of the old table and some of the new, each
// a backend of one of the two; into a new inner map added to the outer
// otherwise. Calls by one owner at a time; reads from others are safe.
type MaglevMap interface {
	Name() string
	Family() Family
	MaxEntries() int
	// TableSize is M, the entries of every table.
	TableSize() uint32
	// IDs returns the service IDs that have a table, in no order.
	IDs() ([]uint16, error)
	// Read copies the table of id into dst (TableSize entries) and
	// reports whether id has one.
	Read(id uint16, dst []uint32) (bool, error)
	// Write makes t (TableSize entries) the table of id.
	Write(id uint16, t []uint32) error
	// Delete removes the tables of ids; a missing one is not an error.
	Delete(ids []uint16) error
	// Counters counts tables written and deleted.
	Counters() Counters
	Entries() int
	SetEntries(n int)
	PinPath() string
	CheckPin() (PinState, error)
	Repin() error
	Close() error
}

// Maglev returns the Maglev map of family f.
func (m *LBMaps) Maglev(f Family) MaglevMap {
	if f == IPv6 {
		return m.Maglev6
	}
	return m.Maglev4
}

// maglevBase is what both implementations share: counters, the entry
// count and fault injection.
type maglevBase struct {
	mapName string
	fam     Family
	size    uint32
	max     int
	fault   FaultFunc
	counts  [OpLookup + 1]atomic.Uint64
	updated atomic.Uint64
	deleted atomic.Uint64
	entries atomic.Int64
}

func (b *maglevBase) init(name string, fam Family, size uint32, max int, fault FaultFunc) {
	b.mapName, b.fam, b.size, b.max, b.fault = name, fam, size, max, fault
}

func (b *maglevBase) Name() string      { return b.mapName }
func (b *maglevBase) Family() Family    { return b.fam }
func (b *maglevBase) MaxEntries() int   { return b.max }
func (b *maglevBase) TableSize() uint32 { return b.size }
func (b *maglevBase) Entries() int      { return int(b.entries.Load()) }
func (b *maglevBase) SetEntries(n int)  { b.entries.Store(int64(n)) }
func (b *maglevBase) Counters() Counters {
	return Counters{Updated: b.updated.Load(), Deleted: b.deleted.Load()}
}

func (b *maglevBase) check(op Op, entries int) error {
	if b.fault == nil {
		return nil
	}
	n := b.counts[op].Add(1)
	if err := b.fault(b.mapName, op, n, entries); err != nil {
		return fmt.Errorf("%s #%d: %w", op, n, err)
	}
	return nil
}

func (b *maglevBase) checkSize(t []uint32) error {
	if len(t) != int(b.size) {
		return fmt.Errorf("table of %d entries, want %d", len(t), b.size)
	}
	return nil
}

// ebpfMaglev is a kernel Maglev map.
type ebpfMaglev struct {
	maglevBase
	outer *ebpf.Map
	inner *ebpf.MapSpec // the inner array's spec, for new tables
	path  string
	id    ebpf.MapID
}

func maglevInnerSpec(fam Family, m uint32) *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name:       fmt.Sprintf("lb%d_maglev_in", fam),
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4 * m,
		MaxEntries: 1,
	}
}

func maglevSpec(name string, fam Family, m uint32, max int) *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name:       name,
		Type:       ebpf.HashOfMaps,
		KeySize:    RevNATKeySize,
		ValueSize:  4,
		MaxEntries: uint32(max),
		InnerMap:   maglevInnerSpec(fam, m),
	}
}

// innerOf opens the inner map of id (nil if id has no table).
func (s *ebpfMaglev) innerOf(id uint16) (*ebpf.Map, error) {
	var inner *ebpf.Map
	err := s.outer.Lookup(MarshalRevNATKey(id), &inner)
	if errors.Is(err, ebpf.ErrKeyNotExist) || errors.Is(err, os.ErrNotExist) {
		return nil, nil // os.ErrNotExist: the inner map went between the lookup and the open
	}
	if err != nil {
		return nil, err
	}
	return inner, nil
}

func (s *ebpfMaglev) IDs() ([]uint16, error) {
	if err := s.check(OpDump, 0); err != nil {
		return nil, fmt.Errorf("dump %s: %w", s.mapName, err)
	}
	for try := 1; ; try++ {
		var (
			out []uint16
			k   [RevNATKeySize]byte
			v   uint32
		)
		it := s.outer.Iterate()
		for it.Next(&k, &v) {
			out = append(out, UnmarshalRevNATKey(k))
		}
		err := it.Err()
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, ebpf.ErrIterationAborted) || try == 5 {
			return nil, fmt.Errorf("dump %s: %w", s.mapName, err)
		}
	}
}

func (s *ebpfMaglev) Read(id uint16, dst []uint32) (bool, error) {
	if err := s.checkSize(dst); err != nil {
		return false, fmt.Errorf("read %s table of service %d: %w", s.mapName, id, err)
	}
	if err := s.check(OpLookup, 1); err != nil {
		return false, fmt.Errorf("read %s table of service %d: %w", s.mapName, id, err)
	}
	inner, err := s.innerOf(id)
	if err != nil || inner == nil {
		if err != nil {
			err = fmt.Errorf("read %s table of service %d: %w", s.mapName, id, err)
		}
		return false, err
	}
	defer inner.Close()
	if err := inner.Lookup(uint32(0), u32Bytes(dst)); err != nil {
		return false, fmt.Errorf("read %s table of service %d: %w", s.mapName, id, err)
	}
	return true, nil
}

func (s *ebpfMaglev) Write(id uint16, t []uint32) error {
	if id == 0 {
		return fmt.Errorf("write %s: service ID 0 is invalid", s.mapName)
	}
	if err := s.checkSize(t); err != nil {
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	if err := s.check(OpUpdate, 1); err != nil {
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	s.updated.Add(1)
	inner, err := s.innerOf(id)
	if err != nil {
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	if inner != nil {
		defer inner.Close()
		if err := inner.Update(uint32(0), u32Bytes(t), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
		}
		return nil
	}
	nm, err := ebpf.NewMap(s.inner)
	if err != nil {
		return fmt.Errorf("write %s table of service %d: create inner map: %w", s.mapName, id, err)
	}
	defer nm.Close() // the outer map holds it from here
	if err := nm.Update(uint32(0), u32Bytes(t), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	if err := s.outer.Update(MarshalRevNATKey(id), nm, ebpf.UpdateAny); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("write %s table of service %d: %w (all its %d entries are in use: raise its size, agent --map-max, library Config.MaxEntries)",
				s.mapName, id, ErrMapFull, s.max)
		}
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	return nil
}

func (s *ebpfMaglev) Delete(ids []uint16) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.check(OpDelete, len(ids)); err != nil {
		return fmt.Errorf("delete %s: %w", s.mapName, err)
	}
	for _, id := range ids {
		if err := s.outer.Delete(MarshalRevNATKey(id)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete %s table of service %d: %w", s.mapName, id, err)
		}
	}
	s.deleted.Add(uint64(len(ids)))
	return nil
}

func (s *ebpfMaglev) PinPath() string { return s.path }
func (s *ebpfMaglev) CheckPin() (PinState, error) {
	return checkPinned(s.path, s.id)
}

func (s *ebpfMaglev) Repin() error {
	if err := repinOver(s.outer, s.path); err != nil {
		return fmt.Errorf("repin %s: %w", s.path, err)
	}
	return nil
}

func (s *ebpfMaglev) Close() error { return s.outer.Close() }

// u32Bytes views t as its bytes (host order): what the inner array holds.
func u32Bytes(t []uint32) []byte {
	if len(t) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&t[0])), 4*len(t))
}

// openMaglev opens (or creates and pins) the Maglev map of fam. A pinned
// map of another type, key or value size, or whose tables have another
// size than m, is refused unless recreate (then replaced, empty). One of
// another capacity is replaced by an empty one of the asked capacity, in
// one rename: nothing is lost, the engine's restore writes every table
// again from the service maps.
func openMaglev(o *opener, name string, fam Family, m uint32, max int) (MaglevMap, error) {
	if o.cfg.InMemory {
		s := &memMaglev{tables: map[uint16][]uint32{}}
		s.maglevBase.init(name, fam, m, max, o.cfg.Fault)
		return s, nil
	}
	spec := maglevSpec(name, fam, m, max)
	path := filepath.Join(o.cfg.Root, name)
	outer, created, err := openOrCreateMaglev(spec, path, o.cfg.Recreate)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	if created {
		o.lb.Created = append(o.lb.Created, name)
	}
	id, err := mapID(outer)
	if err != nil {
		outer.Close()
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	s := &ebpfMaglev{outer: outer, inner: spec.InnerMap, path: path, id: id}
	s.maglevBase.init(name, fam, m, max, o.cfg.Fault)
	return s, nil
}

func openOrCreateMaglev(spec *ebpf.MapSpec, path string, recreate bool) (*ebpf.Map, bool, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil:
		problem := maglevShapeProblem(m, spec)
		if problem == "" && m.MaxEntries() == spec.MaxEntries {
			return m, false, nil
		}
		m.Close()
		if problem != "" && !recreate {
			return nil, false, fmt.Errorf("%w: %s has %s (pass --recreate-maps / Recreate to replace it, or remove it with 'rm %s': "+
				"nothing is lost, the tables are written again from the service maps at start; a packet datapath attached to the old map must be attached again)",
				ErrIncompatible, path, problem, path)
		}
		nm, err := ebpf.NewMap(spec)
		if err != nil {
			return nil, false, fmt.Errorf("create %s: %w", spec.Name, err)
		}
		if err := repinOver(nm, path); err != nil {
			nm.Close()
			return nil, false, fmt.Errorf("replace %s: %w", path, err)
		}
		return nm, true, nil
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, false, fmt.Errorf("load pinned %s: %w", path, err)
	}
	m, err = ebpf.NewMap(spec)
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, false, fmt.Errorf("pin %s: %w", path, err)
	}
	return m, true, nil
}

// MaglevShapeProblem says how the pinned Maglev map m differs from one of
// family fam whose tables have size entries, "" if it does not (see
// maglevShapeProblem; an empty map is probed, nothing written). For a datapath
// loader that must agree with the engine's table size.
func MaglevShapeProblem(m *ebpf.Map, fam Family, size uint32) string {
	return maglevShapeProblem(m, maglevSpec(m.String(), fam, size, int(m.MaxEntries())))
}

// MaglevTableSizeOf returns the entries of the tables of the pinned Maglev
// map m, read from one of them (0 when it holds none).
func MaglevTableSizeOf(m *ebpf.Map) (uint32, error) {
	var k [RevNATKeySize]byte
	if err := m.NextKey(nil, &k); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil
		}
		return 0, err
	}
	var inner *ebpf.Map
	if err := m.Lookup(k, &inner); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil // deleted meanwhile
		}
		return 0, err
	}
	defer inner.Close()
	return inner.ValueSize() / 4, nil
}

// maglevShapeProblem says how the pinned m differs from spec (capacity
// aside), "" if it does not: type, key and value size, and the size of its
// tables — read from one of its inner maps, or, when it has none, probed
// by asking the kernel to replace the absent key 0 (no service has ID 0)
// with a table of spec's size: it refuses an inner map of another shape
// before it looks for the key, and writes nothing.
func maglevShapeProblem(m *ebpf.Map, spec *ebpf.MapSpec) string {
	switch {
	case m.Type() != spec.Type:
		return fmt.Sprintf("type %s, want %s", m.Type(), spec.Type)
	case m.KeySize() != spec.KeySize:
		return fmt.Sprintf("key size %d, want %d", m.KeySize(), spec.KeySize)
	case m.ValueSize() != spec.ValueSize:
		return fmt.Sprintf("value size %d, want %d", m.ValueSize(), spec.ValueSize)
	}
	want := spec.InnerMap.ValueSize / 4
	var k [RevNATKeySize]byte
	if err := m.NextKey(nil, &k); err == nil {
		var inner *ebpf.Map
		if err := m.Lookup(k, &inner); err == nil {
			defer inner.Close()
			if inner.Type() != ebpf.Array || inner.KeySize() != 4 || inner.MaxEntries() != 1 {
				return fmt.Sprintf("inner maps of type %s, key size %d and %d entries, want an array of key size 4 and 1 entry", inner.Type(), inner.KeySize(), inner.MaxEntries())
			}
			if inner.ValueSize() != 4*want {
				return fmt.Sprintf("tables of %d entries, want %d", inner.ValueSize()/4, want)
			}
			return ""
		}
	}
	probe, err := ebpf.NewMap(spec.InnerMap)
	if err != nil {
		return fmt.Sprintf("an inner map that could not be probed (%v)", err)
	}
	defer probe.Close()
	// Only a replacement is asked for, and key 0 is absent: the kernel
	// checks the inner map's shape first (EINVAL if it differs), then finds
	// no key to replace (ENOENT) and writes nothing. A write that succeeds
	// makes the kernel wait for an RCU grace period (it does so after every
	// successful update or delete of a map-in-map from user space): the
	// insert and delete this probe made before cost 16-24 ms per family at
	// every start on the test VM, about 40 ms of a warm restart.
	var zero [RevNATKeySize]byte
	err = m.Update(zero, probe, ebpf.UpdateExist)
	if err == nil || errors.Is(err, ebpf.ErrKeyNotExist) {
		// nil: key 0 was added since NextKey found the map empty, and now
		// holds an empty table of the right shape (no service has ID 0).
		return ""
	}
	return fmt.Sprintf("tables of another size than %d entries (the kernel refused one: %v)", want, err)
}

// memMaglev is the in-memory Maglev map.
type memMaglev struct {
	maglevBase
	mu     sync.RWMutex
	tables map[uint16][]uint32
}

func (s *memMaglev) IDs() ([]uint16, error) {
	if err := s.check(OpDump, 0); err != nil {
		return nil, fmt.Errorf("dump %s: %w", s.mapName, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]uint16, 0, len(s.tables))
	for id := range s.tables {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

func (s *memMaglev) Read(id uint16, dst []uint32) (bool, error) {
	if err := s.checkSize(dst); err != nil {
		return false, fmt.Errorf("read %s table of service %d: %w", s.mapName, id, err)
	}
	if err := s.check(OpLookup, 1); err != nil {
		return false, fmt.Errorf("read %s table of service %d: %w", s.mapName, id, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tables[id]
	copy(dst, t)
	return ok, nil
}

func (s *memMaglev) Write(id uint16, t []uint32) error {
	if id == 0 {
		return fmt.Errorf("write %s: service ID 0 is invalid", s.mapName)
	}
	if err := s.checkSize(t); err != nil {
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	if err := s.check(OpUpdate, 1); err != nil {
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	s.updated.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tables[id]; !ok && len(s.tables) >= s.max {
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, ErrMapFull)
	}
	s.tables[id] = slices.Clone(t)
	return nil
}

func (s *memMaglev) Delete(ids []uint16) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.check(OpDelete, len(ids)); err != nil {
		return fmt.Errorf("delete %s: %w", s.mapName, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.tables, id)
	}
	s.deleted.Add(uint64(len(ids)))
	return nil
}

func (s *memMaglev) PinPath() string             { return "" }
func (s *memMaglev) CheckPin() (PinState, error) { return PinNone, nil }
func (s *memMaglev) Repin() error                { return nil }
func (s *memMaglev) Close() error                { return nil }
