package pagedindex

import "github.com/actorlb/actorlb/internal/packedmap"

// Runs tells which keys come in runs, and their key in run order (Of: a
// bijection on the keys it accepts, Back its inverse), so that a run's
// keys differ in their low bits: for IPv4 addresses, the address's last
// bits lowest (addrkey.BackendRun).
type Runs[K any] struct {
	Of   func(K) (run uint64, ok bool)
	Back func(run uint64) K
}

// Packed is a map from K to V that keeps the keys in runs (as its Runs
// say) in an Index, by their run key, and every other key in a
// packedmap.Map (packed where its packer packs, else whole). A key is in
// one of the two, never both, so Packed behaves as one map[K]V.
type Packed[K comparable, V any] struct {
	runs *Index[uint64, V]
	rest packedmap.Map[K, V]
	r    Runs[K]
}

// NewPacked returns an empty map with room for n keys in runs, of keys in
// runs as r says, the others packed by pk where it can.
func NewPacked[K comparable, V any](n int, r Runs[K], pk packedmap.Packer[K]) *Packed[K, V] {
	return &Packed[K, V]{runs: NewSparse[uint64, V](n), rest: packedmap.New[K, V](0, pk), r: r}
}

// Reserve makes room for inRuns keys in runs and rest other keys, if the
// map is empty (else it does nothing).
func (m *Packed[K, V]) Reserve(inRuns, rest int) {
	if m.Len() == 0 {
		m.runs = NewSparse[uint64, V](inRuns)
		m.rest.Reserve(rest)
	}
}

// Get returns the value of k and whether k is in the map.
func (m *Packed[K, V]) Get(k K) (V, bool) {
	if r, ok := m.r.Of(k); ok {
		return m.runs.Get(r)
	}
	return m.rest.Get(k)
}

// Set sets the value of k.
func (m *Packed[K, V]) Set(k K, v V) {
	if r, ok := m.r.Of(k); ok {
		m.runs.Set(r, v)
		return
	}
	m.rest.Set(k, v)
}

// Delete removes k (nothing if absent).
func (m *Packed[K, V]) Delete(k K) {
	if r, ok := m.r.Of(k); ok {
		m.runs.Delete(r)
		return
	}
	m.rest.Delete(k)
}

// setChunk is how many keys in runs SetSeq readies pages for at a time.
const setChunk = 256

// SetSeq sets the pairs pairs yields as Set would, one after the other,
// for many keys set at once (a restore): it readies the pages of the keys
// in runs a chunk of them at a time (Index.Prepare), so that their sets go
// straight to their pages rather than each going loose first and its
// range moving over after, and takes each key's run key once. The keys
// not in runs are set as they come.
func (m *Packed[K, V]) SetSeq(pairs func(yield func(K, V) bool)) {
	c := new(setChunkOf[V])
	for k, v := range pairs {
		r, ok := m.r.Of(k)
		if !ok {
			m.rest.Set(k, v)
			continue
		}
		c.runs[c.n], c.vals[c.n] = r, v
		if c.n++; c.n == setChunk {
			c.flush(m.runs)
		}
	}
	c.flush(m.runs)
}

// setChunkOf is SetSeq's chunk of keys in runs and their values.
type setChunkOf[V any] struct {
	runs [setChunk]uint64
	vals [setChunk]V
	n    int
}

// flush readies x's pages for the chunk's keys, sets them and empties it.
func (c *setChunkOf[V]) flush(x *Index[uint64, V]) {
	x.Prepare(c.n, c.run)
	for i, r := range c.runs[:c.n] {
		x.Set(r, c.vals[i])
	}
	c.n = 0
}

func (c *setChunkOf[V]) run(i int) uint64 { return c.runs[i] }

// Len returns the number of keys.
func (m *Packed[K, V]) Len() int { return m.runs.Len() + m.rest.Len() }

// All yields every key and its value, in no order. The map must not
// change during the iteration.
func (m *Packed[K, V]) All(yield func(K, V) bool) {
	for r, v := range m.runs.All {
		if !yield(m.r.Back(r), v) {
			return
		}
	}
	m.rest.All(yield)
}
