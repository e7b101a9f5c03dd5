package pagedindex

import "math/bits"

// Packer packs some keys into a uint64, losslessly (Unpack(p) == k
// whenever Pack(k) returns p, true; never two keys alike), as
// packedmap.Packer: the packers of package addrkey are both.
type Packer[K any] interface {
	Pack(key K) (packed uint64, ok bool)
	Unpack(packed uint64) K
}

// Learner is a Packer that learns to pack more keys as they are set
// (packedmap.Learner): Set packs with Learn, Get and Delete with Pack.
type Learner[K any] interface {
	Packer[K]
	Learn(key K) (packed uint64, ok bool)
}

// Packed is a map from K to V that keeps the keys its packer packs in an
// Index, by their packed form rotated left by rot bits (so that a key's
// run lands in the low bits: rot 32 for a packer that puts an address in
// bits 32-63, its last byte lowest there), and every other key whole, in
// a map. A key is in one of the two, never both (the packer's contract:
// what it packs only grows), so Packed behaves as one map[K]V.
type Packed[K comparable, V any] struct {
	runs  *Index[uint64, V]
	full  map[K]V
	pk    Packer[K]
	learn Learner[K] // pk when it is a Learner, else nil
	rot   int
}

// NewPacked returns an empty map with room for n keys, of keys packed by
// pk and rotated by rot.
func NewPacked[K comparable, V any](n int, pk Packer[K], rot int) *Packed[K, V] {
	m := &Packed[K, V]{runs: New[uint64, V](n), full: map[K]V{}, pk: pk, rot: rot}
	m.learn, _ = pk.(Learner[K])
	return m
}

// Reserve makes room for n keys if the map is empty.
func (m *Packed[K, V]) Reserve(n int) {
	if m.Len() == 0 {
		m.runs = New[uint64, V](n)
	}
}

// Get returns the value of k and whether k is in the map.
func (m *Packed[K, V]) Get(k K) (V, bool) {
	if p, ok := m.pk.Pack(k); ok {
		return m.runs.Get(bits.RotateLeft64(p, m.rot))
	}
	v, ok := m.full[k]
	return v, ok
}

// Set sets the value of k.
func (m *Packed[K, V]) Set(k K, v V) {
	p, ok := uint64(0), false
	if m.learn != nil {
		p, ok = m.learn.Learn(k)
	} else {
		p, ok = m.pk.Pack(k)
	}
	if ok {
		m.runs.Set(bits.RotateLeft64(p, m.rot), v)
		return
	}
	m.full[k] = v
}

// Delete removes k.
func (m *Packed[K, V]) Delete(k K) {
	if p, ok := m.pk.Pack(k); ok {
		m.runs.Delete(bits.RotateLeft64(p, m.rot))
		return
	}
	delete(m.full, k)
}

// Len returns the number of keys.
func (m *Packed[K, V]) Len() int { return m.runs.Len() + len(m.full) }

// All yields every key and its value, in no order. The map must not
// change during the iteration.
func (m *Packed[K, V]) All(yield func(K, V) bool) {
	for r, v := range m.runs.All {
		if !yield(m.pk.Unpack(bits.RotateLeft64(r, -m.rot)), v) {
			return
		}
	}
	for k, v := range m.full {
		if !yield(k, v) {
			return
		}
	}
}
