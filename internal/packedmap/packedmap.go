package packedmap

// Packer packs some keys into 8 bytes, losslessly: Unpack(p) == k whenever
// Pack(k) returns p, true, and Pack never gives two keys the same p.
type Packer[K any] interface {
	Pack(key K) (packed uint64, ok bool)
	Unpack(packed uint64) K
}

// Learner is a Packer that learns to pack more keys as they are set: Set
// packs with Learn, which packs every key Pack packs, the same way, and
// may learn to pack k itself. Pack (used by Get and Delete) must not
// learn. What a Learner packs only grows, and a key Learn refuses once is
// refused for good (by Pack and Learn alike): so a key set before stays
// where Set put it (a key Set kept whole never packs later, one it packed
// packs the same way).
type Learner[K any] interface {
	Packer[K]
	Learn(key K) (packed uint64, ok bool)
}

// Map is a map from K to V that keeps the keys its Packer packs in a map
// of their own; every other key is kept whole. A key is in one of the two,
// never both, so Map behaves exactly as one map[K]V.
type Map[K comparable, V any] struct {
	full  map[K]V
	small map[uint64]V // nil without a packer
	pk    Packer[K]
	learn Learner[K] // pk when it is a Learner, else nil
}

// New returns an empty map with room for n keys expected to pack (all of
// them when pk is nil: then it is a plain map[K]V).
func New[K comparable, V any](n int, pk Packer[K]) Map[K, V] {
	if pk == nil {
		return Map[K, V]{full: make(map[K]V, n)}
	}
	m := Map[K, V]{full: map[K]V{}, small: make(map[uint64]V, n), pk: pk}
	m.learn, _ = pk.(Learner[K])
	return m
}

// Adopt returns a map that holds the entries of small, keys packed by pk
// (as Set would pack them: a Learner must have learnt what they need),
// and takes small over: the caller must not use it after.
func Adopt[K comparable, V any](small map[uint64]V, pk Packer[K]) Map[K, V] {
	m := Map[K, V]{full: map[K]V{}, small: small, pk: pk}
	m.learn, _ = pk.(Learner[K])
	return m
}

// Get returns the value of k and whether k is in the map.
func (m *Map[K, V]) Get(k K) (V, bool) {
	if m.pk != nil {
		if p, ok := m.pk.Pack(k); ok {
			v, ok := m.small[p]
			return v, ok
		}
	}
	v, ok := m.full[k]
	return v, ok
}

// Set sets the value of k.
func (m *Map[K, V]) Set(k K, v V) {
	if m.pk != nil {
		pack := m.pk.Pack
		if m.learn != nil {
			pack = m.learn.Learn
		}
		if p, ok := pack(k); ok {
			m.small[p] = v
			return
		}
	}
	m.full[k] = v
}

// Delete removes k (nothing if absent).
func (m *Map[K, V]) Delete(k K) {
	if m.pk != nil {
		if p, ok := m.pk.Pack(k); ok {
			delete(m.small, p)
			return
		}
	}
	delete(m.full, k)
}

// Len returns the number of keys.
func (m *Map[K, V]) Len() int { return len(m.full) + len(m.small) }

// Reserve makes room for n keys if the map is empty (else it does
// nothing: a Go map cannot grow in place). A caller about to add many keys
// at once calls it, so that the map is not grown by doubling through
// every size on the way, each time copying what it holds. The room goes
// to the packed keys when there is a packer.
func (m *Map[K, V]) Reserve(n int) {
	if m.Len() != 0 || n <= 0 {
		return
	}
	if m.pk == nil {
		m.full = make(map[K]V, n)
		return
	}
	m.small = make(map[uint64]V, n)
}

// All yields every key and its value, in no order (a range-over-func
// iterator). The map must not change during the iteration.
func (m *Map[K, V]) All(yield func(K, V) bool) {
	for k, v := range m.full {
		if !yield(k, v) {
			return
		}
	}
	for p, v := range m.small {
		if !yield(m.pk.Unpack(p), v) {
			return
		}
	}
}
