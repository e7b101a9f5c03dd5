package maps

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Map is the interface every map family has, over its entry type E and key
// type KT. Calls by one owner at a time; reads from others are safe.
type Map[E, KT any] interface {
	// Name is the pin and kernel name, such as "lb4_services".
	Name() string
	Family() Family
	MaxEntries() int
	// Update writes the entries in order. On error a prefix may have been
	// written; errors.Is(err, ErrMapFull) when the map is full.
	Update(entries []E) error
	// Delete removes the keys; a missing key is not an error.
	Delete(keys []KT) error
	// Dump returns every entry; the order is unspecified.
	Dump() ([]E, error)
	// DumpEntries is Dump with the entries kept as read and decoded as
	// they are iterated (see Entries): for a reader that goes through
	// them once or twice.
	DumpEntries() (Entries[E], error)
	// Read dumps the map for a drift check decided later (Read.Holds at
	// once, or Read.Check a part at a time), so that the dump, which reads
	// only the map, may run beside the owner's writes, and the check,
	// which reads the owner's copy, in the owner.
	Read() (Read[E], error)
	// Lookup returns the entry for key and whether it exists.
	Lookup(key KT) (E, bool, error)
	// Counters returns the number of entries written and deleted so far.
	Counters() Counters
	// Entries returns the number of entries the map holds as its owner
	// last counted them (SetEntries), without reading the map: 0 until the
	// owner first reports.
	Entries() int
	// SetEntries records how many entries the map holds. Only the map's
	// owner calls it (it knows the count from its copy of the entries);
	// anyone may read it back with Entries.
	SetEntries(n int)
	// PinPath is where the map is pinned ("" for an in-memory map).
	PinPath() string
	// CheckPin reports whether the map's pin still names this map (by
	// kernel map ID): PinMissing or PinReplaced when someone removed or
	// replaced it under the running agent. PinNone for in-memory maps.
	// An error says the pin could not be checked (the kernel refused to
	// open a pin that is there): nothing to repair, check again later.
	CheckPin() (PinState, error)
	// Repin pins this map at its path again, atomically replacing
	// whatever is there (another map pinned in its place is only
	// unpinned, not changed).
	Repin() error
	// Close releases the file descriptor; the pin stays.
	Close() error
}

// ServiceMap is lb4_services or lb6_services.
type ServiceMap interface {
	Map[ServiceEntry, ServiceKey]
}

// BackendMap is lb4_backends or lb6_backends, keyed by backend ID.
type BackendMap interface {
	Map[BackendEntry, uint32]
}

// RevNATMap is lb4_reverse_nat or lb6_reverse_nat, keyed by service ID.
type RevNATMap interface {
	Map[RevNATEntry, uint16]
}

// Counters counts entries written through one map.
type Counters struct {
	Updated uint64 // entries passed to Update, counted before the call (a failed one may have written a prefix)
	Deleted uint64 // keys passed to successful Delete calls
}

// codec translates one family's entries to raw bytes and back. decode
// writes the entry of raw key k and value v into dst (field by field where
// a dump's many entries go: see decodeService4Key).
type codec[E, KT any, K, V comparable] struct {
	encode    func(E) (K, V, error)
	encodeKey func(KT) (K, error)
	decode    func(dst *E, k *K, v *V)
}

type typedMap[E, KT any, K, V comparable] struct {
	fam     Family
	st      store[K, V]
	c       codec[E, KT, K, V]
	updated atomic.Uint64
	deleted atomic.Uint64
	entries atomic.Int64
	// scratch holds the raw keys and values of the last Update or Delete,
	// emptied, for the next (one caller at a time takes it: Swap).
	scratch atomic.Pointer[rawScratch[K, V]]
}

// rawScratch is a typedMap's encoding buffers; only buffers of up to
// scratchMax entries are kept.
type rawScratch[K, V any] struct {
	keys   []K
	values []V
}

const scratchMax = 4096

// takeScratch returns the map's scratch (or a new one), the caller's
// until it gives it back (putScratch).
func (m *typedMap[E, KT, K, V]) takeScratch() *rawScratch[K, V] {
	if sc := m.scratch.Swap(nil); sc != nil {
		return sc
	}
	return &rawScratch[K, V]{}
}

// putScratch keeps keys and values (emptied) for the next call, unless
// they are larger than scratchMax. The store has kept neither.
func (m *typedMap[E, KT, K, V]) putScratch(sc *rawScratch[K, V], keys []K, values []V) {
	if cap(keys) > scratchMax || cap(values) > scratchMax {
		return
	}
	sc.keys, sc.values = keys[:0], values[:0]
	m.scratch.Store(sc)
}

// sized returns buf with length n: buf itself if it has room, else a new
// slice of exactly n.
func sized[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

func (m *typedMap[E, KT, K, V]) Name() string    { return m.st.name() }
func (m *typedMap[E, KT, K, V]) Family() Family  { return m.fam }
func (m *typedMap[E, KT, K, V]) MaxEntries() int { return m.st.maxEntries() }
func (m *typedMap[E, KT, K, V]) Close() error    { return m.st.close() }
func (m *typedMap[E, KT, K, V]) Counters() Counters {
	return Counters{Updated: m.updated.Load(), Deleted: m.deleted.Load()}
}

func (m *typedMap[E, KT, K, V]) Entries() int     { return int(m.entries.Load()) }
func (m *typedMap[E, KT, K, V]) SetEntries(n int) { m.entries.Store(int64(n)) }

func (m *typedMap[E, KT, K, V]) Update(entries []E) error {
	if len(entries) == 0 {
		return nil
	}
	sc := m.takeScratch()
	keys, values := sized(sc.keys, len(entries)), sized(sc.values, len(entries))
	defer m.putScratch(sc, keys, values)
	for i, e := range entries {
		k, v, err := m.c.encode(e)
		if err != nil {
			return fmt.Errorf("update %s: entry %d: %w", m.Name(), i, err)
		}
		keys[i], values[i] = k, v
	}
	// Counted before the call: a failed update may have written a prefix,
	// and a concurrent reader comparing counters must not miss a write.
	m.updated.Add(uint64(len(entries)))
	if err := m.st.update(keys, values); err != nil {
		if errors.Is(err, ErrMapFull) {
			return fmt.Errorf("update %s: %w (all its %d entries are in use: raise its size, agent --map-max, library Config.MaxEntries)",
				m.Name(), err, m.st.maxEntries())
		}
		return fmt.Errorf("update %s: %w", m.Name(), err)
	}
	return nil
}

func (m *typedMap[E, KT, K, V]) Delete(keys []KT) error {
	if len(keys) == 0 {
		return nil
	}
	sc := m.takeScratch()
	raw := sized(sc.keys, len(keys))
	defer m.putScratch(sc, raw, sc.values)
	for i, k := range keys {
		r, err := m.c.encodeKey(k)
		if err != nil {
			return fmt.Errorf("delete %s: key %d: %w", m.Name(), i, err)
		}
		raw[i] = r
	}
	if err := m.st.delete(raw); err != nil {
		return fmt.Errorf("delete %s: %w", m.Name(), err)
	}
	m.deleted.Add(uint64(len(keys)))
	return nil
}

func (m *typedMap[E, KT, K, V]) Dump() ([]E, error) {
	es, err := m.DumpEntries()
	if err != nil {
		return nil, err
	}
	return es.Slice(), nil
}

func (m *typedMap[E, KT, K, V]) DumpEntries() (Entries[E], error) {
	d, err := m.dumpRaw()
	if err != nil {
		return Entries[E]{}, err
	}
	return dumpedEntries(d.ks, d.vs, d.n, m.c.decode), nil
}

// rawDump is a dump as read: the raw chunks (the values of chunk c are
// vs[c], as many as its keys), n entries in all; distinct says whether it
// read each raw key once (store.dump).
type rawDump[K, V any] struct {
	ks       [][]K
	vs       [][]V
	n        int
	distinct bool
}

// dumpRaw dumps the map, keeping the raw chunks as they come (no growing
// slice copied over and over), to be decoded as they are read.
func (m *typedMap[E, KT, K, V]) dumpRaw() (rawDump[K, V], error) {
	var d rawDump[K, V]
	var err error
	d.distinct, err = m.st.dump(func(keys []K, values []V) {
		d.ks, d.vs, d.n = append(d.ks, keys), append(d.vs, values), d.n+len(keys)
	}, func() { d.ks, d.vs, d.n = nil, nil, 0 })
	if err != nil {
		return rawDump[K, V]{}, fmt.Errorf("dump %s: %w", m.Name(), err)
	}
	return d, nil
}

// Read is a map's dump as Map.Read took it: its entries, and a check of
// them against the owner's copy, to be made later, at once (Holds) or a
// part of a chunk at a time (Check). Nothing writes a Read once made.
type Read[E any] struct {
	Entries[E]
	distinct bool
	// check calls f with entries [from, to) of raw chunk c (decoded) and
	// whether each raw key is the encoding of its key, until f answers
	// false; it answers whether f accepted them all.
	check   func(c, from, to int, f func(e E, canonical bool) bool) bool
	entries func(c int) int // the entries of raw chunk c
}

// Distinct reports whether the dump read each key once (a batch lookup
// of a hash map does; an iteration may read a key again).
func (r Read[E]) Distinct() bool { return r.distinct }

// NumChunks is the number of chunks Check takes.
func (r Read[E]) NumChunks() int { return r.chunks }

// ChunkEntries is the number of entries of chunk c.
func (r Read[E]) ChunkEntries(c int) int { return r.entries(c) }

// Check calls f with entries [from, to) of chunk c, decoded, and whether
// each raw key is the encoding of its key (a key written with stray bytes
// in its padding is not: it decodes to the key of another entry), until f
// answers false; it answers whether f accepted them all.
func (r Read[E]) Check(c, from, to int, f func(e E, canonical bool) bool) bool {
	return r.check(c, from, to, f)
}

// Holds reports whether the dump holds exactly n entries under n
// distinct keys, each of which has accepts (a drift check's common case,
// decided without building anything): it does when the dump read each raw
// key once (store.dump's distinct), every key read is the encoding of the
// entry decoded from it (so that no two raw keys decode to one entry key:
// a key written with stray bytes in its padding does not), and n entries
// were read, each accepted. It answers false at the first entry that
// fails (the rest are not decoded). False is not proof of a difference (a
// dump that may repeat keys, or a key read in another encoding than its
// own, answers false): compare the dump exactly then.
func (r Read[E]) Holds(n int, has func(E) bool) bool {
	if !r.distinct || r.Len() != n {
		return false
	}
	for c := range r.NumChunks() {
		ok := r.Check(c, 0, r.ChunkEntries(c), func(e E, canonical bool) bool {
			return canonical && has(e)
		})
		if !ok {
			return false
		}
	}
	return true
}

func (m *typedMap[E, KT, K, V]) Read() (Read[E], error) {
	d, err := m.dumpRaw()
	if err != nil {
		return Read[E]{}, err
	}
	r := Read[E]{Entries: dumpedEntries(d.ks, d.vs, d.n, m.c.decode), distinct: d.distinct}
	r.entries = func(c int) int { return len(d.ks[c]) }
	r.check = func(c, from, to int, f func(E, bool) bool) bool {
		kc := d.ks[c][:to]
		vc := d.vs[c][:to]
		var e E
		for i := from; i < to; i++ {
			m.c.decode(&e, &kc[i], &vc[i])
			k, _, err := m.c.encode(e)
			if !f(e, err == nil && k == kc[i]) {
				return false
			}
		}
		return true
	}
	return r, nil
}

func (m *typedMap[E, KT, K, V]) Lookup(key KT) (E, bool, error) {
	var zero E
	k, err := m.c.encodeKey(key)
	if err != nil {
		return zero, false, fmt.Errorf("lookup %s: %w", m.Name(), err)
	}
	v, ok, err := m.st.lookup(k)
	if err != nil {
		return zero, false, fmt.Errorf("lookup %s: %w", m.Name(), err)
	}
	if !ok {
		return zero, false, nil
	}
	var e E
	m.c.decode(&e, &k, &v)
	return e, true, nil
}

// Codecs, one per map and family.

var service4Codec = codec[ServiceEntry, ServiceKey, [Service4KeySize]byte, [ServiceValueSize]byte]{
	encode: func(e ServiceEntry) ([Service4KeySize]byte, [ServiceValueSize]byte, error) {
		k, err := MarshalService4Key(e.Key)
		return k, MarshalServiceValue(e.Value), err
	},
	encodeKey: MarshalService4Key,
	decode: func(d *ServiceEntry, k *[Service4KeySize]byte, v *[ServiceValueSize]byte) {
		decodeService4Key(&d.Key, k)
		decodeServiceValue(&d.Value, v)
	},
}

var service6Codec = codec[ServiceEntry, ServiceKey, [Service6KeySize]byte, [ServiceValueSize]byte]{
	encode: func(e ServiceEntry) ([Service6KeySize]byte, [ServiceValueSize]byte, error) {
		k, err := MarshalService6Key(e.Key)
		return k, MarshalServiceValue(e.Value), err
	},
	encodeKey: MarshalService6Key,
	decode: func(d *ServiceEntry, k *[Service6KeySize]byte, v *[ServiceValueSize]byte) {
		decodeService6Key(&d.Key, k)
		decodeServiceValue(&d.Value, v)
	},
}

func encodeBackendID(id uint32) ([BackendKeySize]byte, error) {
	if id == 0 {
		return [BackendKeySize]byte{}, fmt.Errorf("backend ID 0 is invalid")
	}
	return MarshalBackendKey(id), nil
}

var backend4Codec = codec[BackendEntry, uint32, [BackendKeySize]byte, [Backend4Size]byte]{
	encode: func(e BackendEntry) ([BackendKeySize]byte, [Backend4Size]byte, error) {
		k, err := encodeBackendID(e.ID)
		if err != nil {
			return k, [Backend4Size]byte{}, err
		}
		v, err := MarshalBackend4(e.Value)
		return k, v, err
	},
	encodeKey: rawBackendID,
	decode: func(d *BackendEntry, k *[BackendKeySize]byte, v *[Backend4Size]byte) {
		d.ID = UnmarshalBackendKey(*k)
		decodeBackend4(&d.Value, v)
	},
}

var backend6Codec = codec[BackendEntry, uint32, [BackendKeySize]byte, [Backend6Size]byte]{
	encode: func(e BackendEntry) ([BackendKeySize]byte, [Backend6Size]byte, error) {
		k, err := encodeBackendID(e.ID)
		if err != nil {
			return k, [Backend6Size]byte{}, err
		}
		v, err := MarshalBackend6(e.Value)
		return k, v, err
	},
	encodeKey: rawBackendID,
	decode: func(d *BackendEntry, k *[BackendKeySize]byte, v *[Backend6Size]byte) {
		d.ID = UnmarshalBackendKey(*k)
		decodeBackend6(&d.Value, v)
	},
}

// Keys of 0 are never written, but a map written by someone else may hold
// one: delete and lookup accept it so restore can remove it.
func rawBackendID(id uint32) ([BackendKeySize]byte, error) { return MarshalBackendKey(id), nil }
func rawRevNATID(id uint16) ([RevNATKeySize]byte, error)   { return MarshalRevNATKey(id), nil }

func encodeRevNATID(id uint16) ([RevNATKeySize]byte, error) {
	if id == 0 {
		return [RevNATKeySize]byte{}, fmt.Errorf("service ID 0 is invalid")
	}
	return MarshalRevNATKey(id), nil
}

var revNAT4Codec = codec[RevNATEntry, uint16, [RevNATKeySize]byte, [RevNAT4Size]byte]{
	encode: func(e RevNATEntry) ([RevNATKeySize]byte, [RevNAT4Size]byte, error) {
		k, err := encodeRevNATID(e.ID)
		if err != nil {
			return k, [RevNAT4Size]byte{}, err
		}
		v, err := MarshalRevNAT4(e.Value)
		return k, v, err
	},
	encodeKey: rawRevNATID,
	decode: func(d *RevNATEntry, k *[RevNATKeySize]byte, v *[RevNAT4Size]byte) {
		*d = RevNATEntry{ID: UnmarshalRevNATKey(*k), Value: UnmarshalRevNAT4(*v)}
	},
}

var revNAT6Codec = codec[RevNATEntry, uint16, [RevNATKeySize]byte, [RevNAT6Size]byte]{
	encode: func(e RevNATEntry) ([RevNATKeySize]byte, [RevNAT6Size]byte, error) {
		k, err := encodeRevNATID(e.ID)
		if err != nil {
			return k, [RevNAT6Size]byte{}, err
		}
		v, err := MarshalRevNAT6(e.Value)
		return k, v, err
	},
	encodeKey: rawRevNATID,
	decode: func(d *RevNATEntry, k *[RevNATKeySize]byte, v *[RevNAT6Size]byte) {
		*d = RevNATEntry{ID: UnmarshalRevNATKey(*k), Value: UnmarshalRevNAT6(*v)}
	},
}
