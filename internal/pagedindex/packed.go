package pagedindex

import "github.com/actorlb/actorlb/internal/packedmap"

// Runs tells which packed keys come in runs, and their key in run order
// (a bijection on the keys it accepts, Back its inverse), so that a run's
// keys differ in their low bits: for a packer that puts an IPv4 address
// in bits 32-63, the packed key rotated by 32 bits.
type Runs struct {
	Of   func(packed uint64) (run uint64, ok bool)
	Back func(run uint64) (packed uint64)
}

// Packed is a map from K to V that keeps the keys its packer (a
// packedmap.Packer) packs and runs accepts in an Index, by their run key, the other keys it packs
// in a map of packed keys (as packedmap), and every other key whole, in a
// map. A key is in one of the three, never two (the packer's contract:
// what it packs only grows, the same way), so Packed behaves as one
// map[K]V.
type Packed[K comparable, V any] struct {
	runs  *Index[uint64, V]
	small map[uint64]V
	full  map[K]V
	pk    packedmap.Packer[K]
	learn packedmap.Learner[K] // pk when it is a Learner, else nil
	r     Runs
}

// NewPacked returns an empty map with room for n keys, of keys packed by
// pk and in runs as r says.
func NewPacked[K comparable, V any](n int, pk packedmap.Packer[K], r Runs) *Packed[K, V] {
	m := &Packed[K, V]{runs: NewSparse[uint64, V](n), small: map[uint64]V{}, full: map[K]V{}, pk: pk, r: r}
	m.learn, _ = pk.(packedmap.Learner[K])
	return m
}

// Reserve makes room for n keys, expected in runs, if the map is empty.
func (m *Packed[K, V]) Reserve(n int) {
	if m.Len() == 0 {
		m.runs = NewSparse[uint64, V](n)
	}
}

// Get returns the value of k and whether k is in the map.
func (m *Packed[K, V]) Get(k K) (V, bool) {
	if p, ok := m.pk.Pack(k); ok {
		if r, ok := m.r.Of(p); ok {
			return m.runs.Get(r)
		}
		v, ok := m.small[p]
		return v, ok
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
	switch {
	case !ok:
		m.full[k] = v
	default:
		if r, ok := m.r.Of(p); ok {
			m.runs.Set(r, v)
			return
		}
		m.small[p] = v
	}
}

// Delete removes k.
func (m *Packed[K, V]) Delete(k K) {
	if p, ok := m.pk.Pack(k); ok {
		if r, ok := m.r.Of(p); ok {
			m.runs.Delete(r)
			return
		}
		delete(m.small, p)
		return
	}
	delete(m.full, k)
}

// Len returns the number of keys.
func (m *Packed[K, V]) Len() int { return m.runs.Len() + len(m.small) + len(m.full) }

// All yields every key and its value, in no order. The map must not
// change during the iteration.
func (m *Packed[K, V]) All(yield func(K, V) bool) {
	for r, v := range m.runs.All {
		if !yield(m.pk.Unpack(m.r.Back(r)), v) {
			return
		}
	}
	for p, v := range m.small {
		if !yield(m.pk.Unpack(p), v) {
			return
		}
	}
	for k, v := range m.full {
		if !yield(k, v) {
			return
		}
	}
}
