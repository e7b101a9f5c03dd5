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
	// Write makes t (TableSize entries) the table of id: Stage, then
	// Flush.
	Write(id uint16, t []uint32) error
	// Stage is Write, except that a table new to the map (id had none)
	// goes into a new inner map that joins the outer map at the next
	// Flush, with every other staged since, in one batch update. The
	// kernel waits for an RCU grace period after each update or delete
	// of a map of maps from user space (9 ms on the test VM), after a
	// batch once. Read, IDs and Delete treat a staged table as written;
	// the datapath sees it after Flush. A table the map holds already is
	// written in place at once. Each staged table holds a file descriptor
	// until Flush: flush every few hundred.
	Stage(id uint16, t []uint32) error
	// Staged is the number of tables waiting for Flush.
	Staged() int
	// Flush adds the staged tables to the map. On error it returns the
	// IDs of those it did not add (from the first the kernel refused on,
	// in the order they were staged): they are gone, as if never written.
	Flush() (notWritten []uint16, err error)
	// Delete removes the tables of ids (staged ones included) in one
	// batch; a missing one is not an error.
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
	// staged are the new tables waiting for Flush, in Stage order (the
	// owner's; mu lets Read and IDs from others see them too).
	mu     sync.Mutex
	staged []stagedTable
}

// stagedTable is a new table's inner map, not yet in the outer map.
type stagedTable struct {
	id uint16
	m  *ebpf.Map
}

// stagedOf returns the staged inner map of id, or nil. s.mu is held.
func (s *ebpfMaglev) stagedOf(id uint16) *ebpf.Map {
	for i := len(s.staged) - 1; i >= 0; i-- { // at most a few hundred
		if s.staged[i].id == id {
			return s.staged[i].m
		}
	}
	return nil
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
			s.mu.Lock()
			for _, st := range s.staged {
				out = append(out, st.id)
			}
			s.mu.Unlock()
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
	s.mu.Lock()
	if m := s.stagedOf(id); m != nil {
		defer s.mu.Unlock()
		if err := m.Lookup(uint32(0), u32Bytes(dst)); err != nil {
			return false, fmt.Errorf("read %s table of service %d: %w", s.mapName, id, err)
		}
		return true, nil
	}
	s.mu.Unlock()
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
	if err := s.Stage(id, t); err != nil {
		return err
	}
	_, err := s.Flush()
	return err
}

func (s *ebpfMaglev) Stage(id uint16, t []uint32) error {
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
	if m := s.stagedOf(id); m != nil {
		if err := m.Update(uint32(0), u32Bytes(t), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
		}
		return nil
	}
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
	if err := nm.Update(uint32(0), u32Bytes(t), ebpf.UpdateAny); err != nil {
		nm.Close()
		return fmt.Errorf("write %s table of service %d: %w", s.mapName, id, err)
	}
	s.staged = append(s.staged, stagedTable{id: id, m: nm})
	return nil
}

func (s *ebpfMaglev) Staged() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.staged)
}

func (s *ebpfMaglev) Flush() ([]uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	staged := s.staged
	s.staged = nil
	if len(staged) == 0 {
		return nil, nil
	}
	defer func() {
		for _, st := range staged {
			st.m.Close() // the outer map holds those it took
		}
	}()
	if err := s.check(OpUpdate, len(staged)); err != nil {
		// An injected fault: the batch fails whole, before the kernel.
		return stagedIDs(staged), fmt.Errorf("write %s table of service %d: %w", s.mapName, staged[0].id, err)
	}
	keys := make([][RevNATKeySize]byte, len(staged))
	fds := make([]uint32, len(staged))
	for i, st := range staged {
		keys[i], fds[i] = MarshalRevNATKey(st.id), uint32(st.m.FD())
	}
	n, err := s.outer.BatchUpdate(keys, fds, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		// A kernel without batch operations on maps of maps: one
		// update each.
		for n, err = 0, nil; n < len(staged); n++ {
			if err = s.outer.Update(keys[n], staged[n].m, ebpf.UpdateAny); err != nil {
				break
			}
		}
	}
	if err == nil {
		return nil, nil
	}
	n = min(max(n, 0), len(staged)-1)
	notWritten := stagedIDs(staged[n:])
	if errors.Is(err, unix.E2BIG) {
		return notWritten, fmt.Errorf("write %s table of service %d: %w (all its %d entries are in use: raise its size, agent --map-max, library Config.MaxEntries)",
			s.mapName, staged[n].id, ErrMapFull, s.max)
	}
	return notWritten, fmt.Errorf("write %s table of service %d: %w", s.mapName, staged[n].id, err)
}

func stagedIDs(staged []stagedTable) []uint16 {
	out := make([]uint16, len(staged))
	for i, st := range staged {
		out[i] = st.id
	}
	return out
}

func (s *ebpfMaglev) Delete(ids []uint16) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.check(OpDelete, len(ids)); err != nil {
		return fmt.Errorf("delete %s: %w", s.mapName, err)
	}
	s.mu.Lock()
	keys := make([][RevNATKeySize]byte, 0, len(ids))
	for _, id := range ids {
		if m := s.stagedOf(id); m != nil {
			m.Close()
			s.staged = slices.DeleteFunc(s.staged, func(st stagedTable) bool { return st.id == id })
			continue
		}
		keys = append(keys, MarshalRevNATKey(id))
	}
	s.mu.Unlock()
	// One batch, so one RCU grace period; the kernel stops at a key it
	// does not find (ENOENT, with the count deleted before it): the rest
	// is sent again past it.
	for len(keys) > 0 {
		n, err := s.outer.BatchDelete(keys, nil)
		if err == nil {
			break
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			for _, k := range keys {
				if err := s.outer.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("delete %s table of service %d: %w", s.mapName, UnmarshalRevNATKey(k), err)
				}
			}
			break
		}
		n = min(max(n, 0), len(keys)-1)
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete %s table of service %d: %w", s.mapName, UnmarshalRevNATKey(keys[n]), err)
		}
		keys = keys[n+1:]
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

func (s *ebpfMaglev) Close() error {
	s.mu.Lock()
	for _, st := range s.staged {
		st.m.Close()
	}
	s.staged = nil
	s.mu.Unlock()
	return s.outer.Close()
}

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

// memMaglev is the in-memory Maglev map. Like the kernel's, it holds a
// new table staged until Flush, where a full map refuses it.
type memMaglev struct {
	maglevBase
	mu     sync.RWMutex
	tables map[uint16][]uint32
	staged []uint16 // new tables (in tables already), in Stage order
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
	if err := s.Stage(id, t); err != nil {
		return err
	}
	_, err := s.Flush()
	return err
}

func (s *memMaglev) Stage(id uint16, t []uint32) error {
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
	if _, ok := s.tables[id]; !ok {
		s.staged = append(s.staged, id)
	}
	s.tables[id] = slices.Clone(t)
	return nil
}

func (s *memMaglev) Staged() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.staged)
}

func (s *memMaglev) Flush() ([]uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	staged := s.staged
	s.staged = nil
	if len(staged) == 0 {
		return nil, nil
	}
	if err := s.check(OpUpdate, len(staged)); err != nil {
		// An injected fault: the batch fails whole.
		for _, id := range staged {
			delete(s.tables, id)
		}
		return staged, fmt.Errorf("write %s table of service %d: %w", s.mapName, staged[0], err)
	}
	held := len(s.tables) - len(staged)
	for i, id := range staged {
		if held >= s.max {
			for _, gone := range staged[i:] {
				delete(s.tables, gone)
			}
			return slices.Clone(staged[i:]), fmt.Errorf("write %s table of service %d: %w", s.mapName, id, ErrMapFull)
		}
		held++
	}
	return nil, nil
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
		s.staged = slices.DeleteFunc(s.staged, func(x uint16) bool { return x == id })
	}
	s.deleted.Add(uint64(len(ids)))
	return nil
}

func (s *memMaglev) PinPath() string             { return "" }
func (s *memMaglev) CheckPin() (PinState, error) { return PinNone, nil }
func (s *memMaglev) Repin() error                { return nil }
func (s *memMaglev) Close() error                { return nil }
