package actors

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/actorlb/actorlb/internal/pagedindex"
	"github.com/actorlb/actorlb/maps"
)

// mirror is the pure core of a map owner: one map and an in-memory copy of
// its entries, so that writes of unchanged entries and deletes of absent
// keys never reach the kernel. Not safe for concurrent use: its actor owns it.
// It keeps values only (the key is the map's key), to save memory.
type mirror[E, K, V comparable] struct {
	m        maps.Map[E, K]
	split    func(E) (K, V)
	join     func(K, V) E
	newIndex func(n int) index[K, V] // an empty index with room for n
	entries  index[K, V]             // nil until index
	loaded   maps.Entries[E]         // the entries of the last load, until index
	check    *mapCheck[E, K]         // the drift check in flight (beginCheck), if any
	// scratch buffers of apply, kept between calls unless large.
	ws  []E
	ds  []K
	kvs []keyVal[K, V] // the split of each write in ws
}

// keyVal is an entry split into its key and its mirror value.
type keyVal[K, V any] struct {
	k K
	v V
}

// scratchMax is the largest scratch buffer kept between applies.
const scratchMax = 4096

// scratch returns the scratch buffers to keep for the next apply: ws and
// ds emptied, or nil if they grew past scratchMax. ws is kept only if
// changedOnly copied into it (else it is the caller's writes, and prev,
// the scratch before, stays).
func scratch[E, K any](prev, ws []E, copied bool, ds []K) ([]E, []K) {
	if !copied {
		ws = prev
	}
	return kept(ws), kept(ds)
}

// grown returns buf emptied, with room for n elements: a new buffer of
// exactly n if buf is smaller (a batch is not grown by doubling).
func grown[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, 0, n)
	}
	return buf[:0]
}

// kept returns buf emptied to keep as scratch for the next call, or nil
// if it grew past scratchMax.
func kept[T any](buf []T) []T {
	if cap(buf) > scratchMax {
		return nil
	}
	return buf[:0]
}

// changedOnly returns the writes for which changed is true, in order
// (changed is called once per write, in order). The writes name each key
// once (the supervisor never has two writes of one key in flight): a key
// written twice in one batch would be compared with the mirror as it was
// before the batch, and a second write equal to it dropped after a first
// that differs. When every write changes
// something, as when a batch creates services, it returns writes itself
// (copied false: the caller must not write to it); else a copy in buf, or
// in one new buffer of the size needed (copied true), never grown by
// doubling: a batch of 100,000 entries must not allocate twice its size.
func changedOnly[E any](writes, buf []E, changed func(E) bool) (ws []E, copied bool) {
	for i, e := range writes {
		if changed(e) {
			continue
		}
		ws = buf[:0]
		if rest := len(writes) - 1; cap(ws) < rest {
			ws = make([]E, 0, rest)
		}
		ws = append(ws, writes[:i]...)
		for _, e := range writes[i+1:] {
			if changed(e) {
				ws = append(ws, e)
			}
		}
		return ws, true
	}
	return writes, false
}

func newMirror[E, K, V comparable](m maps.Map[E, K], split func(E) (K, V), join func(K, V) E) *mirror[E, K, V] {
	return newMirrorIndexed(m, split, join, newMapIndex[K, V])
}

// newMirrorIndexed is newMirror with another index than a Go map.
func newMirrorIndexed[E, K, V comparable](m maps.Map[E, K], split func(E) (K, V), join func(K, V) E, newIndex func(int) index[K, V]) *mirror[E, K, V] {
	return &mirror[E, K, V]{m: m, split: split, join: join, newIndex: newIndex, entries: newIndex(0)}
}

// index is a mirror's entries by key.
type index[K, V comparable] interface {
	get(k K) (V, bool)
	set(k K, v V)
	del(k K)
	len() int
	all(yield func(K, V) bool)
}

// preparer is an index that readies itself for a request's sets: the n
// keys key(i), set in that order right after prepare returns.
type preparer[K comparable] interface {
	prepare(n int, key func(int) K)
}

// mapIndex is the plain index: a Go map.
type mapIndex[K, V comparable] map[K]V

func newMapIndex[K, V comparable](n int) index[K, V] { return mapIndex[K, V](make(map[K]V, n)) }

func (x mapIndex[K, V]) get(k K) (V, bool) { v, ok := x[k]; return v, ok }
func (x mapIndex[K, V]) set(k K, v V)      { x[k] = v }
func (x mapIndex[K, V]) del(k K)           { delete(x, k) }
func (x mapIndex[K, V]) len() int          { return len(x) }
func (x mapIndex[K, V]) all(yield func(K, V) bool) {
	for k, v := range x {
		if !yield(k, v) {
			return
		}
	}
}

// load replaces the mirror with the map's contents. The entries are
// indexed later (index), so that an owner can hand the raw dump to the
// supervisor first and index while the supervisor rebuilds.
func (o *mirror[E, K, V]) load() error {
	es, err := o.m.DumpEntries()
	if err != nil {
		return err
	}
	o.loaded, o.entries = es, nil
	o.m.SetEntries(es.Len())
	o.check.reload()
	return nil
}

// index builds the mirror's index from the last load, if not done yet.
func (o *mirror[E, K, V]) index() {
	if o.entries != nil {
		return
	}
	o.entries = o.newIndex(o.loaded.Len())
	for chunk := range o.loaded.Chunks(make([]E, min(maps.ChunkLen, o.loaded.Len()))) {
		for _, e := range chunk {
			k, v := o.split(e)
			o.entries.set(k, v)
		}
	}
	o.loaded = maps.Entries[E]{}
	o.m.SetEntries(o.entries.len()) // a dump may repeat a key
}

// apply writes the entries that differ, in order, then deletes the keys
// present, in order. After a failed write the mirror is reloaded from the
// map, which may hold a prefix of the writes. Either way the map's entry
// count (maps.Map.SetEntries) is the mirror's when it returns.
func (o *mirror[E, K, V]) apply(writes []E, deletes []K) (written, deleted int, err error) {
	o.index()
	kvs := o.kvs[:0] // aligned with ws: changedOnly asks once per write, in order
	asked := 0
	ws, copied := changedOnly(writes, o.ws, func(e E) bool {
		asked++
		k, v := o.split(e)
		if cur, ok := o.entries.get(k); ok && cur == v {
			return false
		}
		if len(kvs) == cap(kvs) {
			// Room for this write and every one after it, at once: grown
			// by appends, the split of a batch of 4,000 writes passed
			// scratchMax (3,584 to 5,120 entries) and was not kept, so
			// the next such batch grew it again through every size. A
			// batch that changes nothing makes no room.
			kvs = slices.Grow(kvs, len(writes)-asked+1)
		}
		kvs = append(kvs, keyVal[K, V]{k, v})
		return true
	})
	ds := o.ds[:0]
	defer func() {
		o.ws, o.ds = scratch(o.ws, ws, copied, ds)
		o.kvs = kept(kvs)
		if o.entries != nil { // nil after a reload: load has set the count
			o.m.SetEntries(o.entries.len())
		}
	}()
	if len(ws) > 0 {
		if err := o.m.Update(ws); err != nil {
			return 0, 0, reloadAfter(err, o.load)
		}
		if o.entries.len() == 0 && len(ws) >= reserveMin {
			o.entries = o.newIndex(len(ws)) // sized at once, not grown by doubling
		}
		if p, ok := o.entries.(preparer[K]); ok {
			p.prepare(len(kvs), func(i int) K { return kvs[i].k })
		}
		for _, kv := range kvs {
			k, v := kv.k, kv.v
			if o.check.writing() {
				old, had := o.entries.get(k)
				o.check.wrote(k, o.join(k, old), had)
			}
			o.entries.set(k, v)
		}
	}
	for _, k := range deletes {
		if _, ok := o.entries.get(k); ok {
			ds = append(ds, k)
		}
	}
	if len(ds) > 0 {
		if err := o.m.Delete(ds); err != nil {
			return len(ws), 0, reloadAfter(err, o.load)
		}
		for _, k := range ds {
			if o.check.writing() {
				old, _ := o.entries.get(k) // ds holds only keys the mirror has
				o.check.wrote(k, o.join(k, old), true)
			}
			o.entries.del(k)
		}
	}
	return len(ws), len(ds), nil
}

// reloadAfter rereads a mirror's map (load) after the write that failed
// with err, which may have written a prefix, and returns err.
func reloadAfter(err error, load func() error) error {
	if lerr := load(); lerr != nil {
		return fmt.Errorf("%w (and reloading the mirror failed: %v)", err, lerr)
	}
	return err
}

// dump returns the mirror's entries: before index, the loaded dump itself
// (nothing writes to it), else a copy (collect).
func (o *mirror[E, K, V]) dump() maps.Entries[E] {
	if o.entries == nil {
		return o.loaded
	}
	return maps.EntriesOf(o.collect())
}

// collect returns a copy of the indexed mirror's entries.
func (o *mirror[E, K, V]) collect() []E {
	out := make([]E, 0, o.entries.len())
	for k, v := range o.entries.all {
		out = append(out, o.join(k, v))
	}
	return out
}

// Splitting entries into key and value, and back.

// Mirrors keep values without pointers: smaller, and not scanned by the
// garbage collector (a netip.Addr holds one). Queue keys and the service
// mirror's frontend index use the same form of an address.

// ipForm is how a mirror value holds its address: addrkey.IP (17 bytes, any
// address) or addrkey.IP4 (5 bytes, IPv4 maps).
type ipForm interface {
	comparable
	Addr() netip.Addr
}

// backendVal is a maps.BackendValue without pointers: 24 bytes with an ip,
// 12 with an ip4 (not 32). The address comes last so that the small form
// packs with the other fields.
type backendVal[A ipForm] struct {
	port    uint16
	cluster uint16
	proto   uint8
	state   uint8
	zone    uint8
	addr    A
}

// splitBackend returns the mirror's split for addresses of form A (of
// makes one).
func splitBackend[A ipForm](of func(netip.Addr) A) func(maps.BackendEntry) (uint32, backendVal[A]) {
	return func(e maps.BackendEntry) (uint32, backendVal[A]) {
		v := e.Value
		return e.ID, backendVal[A]{v.Port, v.ClusterID, v.Proto, v.State, v.Zone, of(v.Address)}
	}
}

func joinBackend[A ipForm](k uint32, v backendVal[A]) maps.BackendEntry {
	return maps.BackendEntry{ID: k, Value: maps.BackendValue{
		Address: v.addr.Addr(), Port: v.port, Proto: v.proto, State: v.state, ClusterID: v.cluster, Zone: v.zone,
	}}
}

// revNATVal is a maps.RevNATValue without pointers: 20 bytes with an ip,
// 8 with an ip4.
type revNATVal[A ipForm] struct {
	port uint16
	addr A
}

func splitRevNAT[A ipForm](of func(netip.Addr) A) func(maps.RevNATEntry) (uint16, revNATVal[A]) {
	return func(e maps.RevNATEntry) (uint16, revNATVal[A]) {
		return e.ID, revNATVal[A]{e.Value.Port, of(e.Value.Address)}
	}
}

// idIndex is a mirror's index by ID: a pagedindex.Index. The allocator
// hands backend and service IDs out in cursor order, so they are mostly
// runs: a page takes 8 bytes an IPv4 entry where a Go map's slot (with
// its control byte and spare room) takes about twice that, and the
// entries of one request (a run of new backends or services) share a page
// rather than each probing a table. The backend mirrors key it by backend
// ID, the revNAT mirrors by service ID.
type idIndex[K pagedindex.Key, V comparable] struct {
	p *pagedindex.Index[K, V]
}

func newIDIndex[K pagedindex.Key, V comparable](n int) idIndex[K, V] {
	return idIndex[K, V]{pagedindex.New[K, V](n)}
}

func newRevNATIndex[V comparable](n int) index[uint16, V] { return newIDIndex[uint16, V](n) }

func (x idIndex[K, V]) get(k K) (V, bool)              { return x.p.Get(k) }
func (x idIndex[K, V]) set(k K, v V)                   { x.p.Set(k, v) }
func (x idIndex[K, V]) del(k K)                        { x.p.Delete(k) }
func (x idIndex[K, V]) len() int                       { return x.p.Len() }
func (x idIndex[K, V]) prepare(n int, key func(int) K) { x.p.Prepare(n, key) }
func (x idIndex[K, V]) all(yield func(K, V) bool)      { x.p.All(yield) }

func joinRevNAT[A ipForm](k uint16, v revNATVal[A]) maps.RevNATEntry {
	return maps.RevNATEntry{ID: k, Value: maps.RevNATValue{Address: v.addr.Addr(), Port: v.port}}
}
