package table

import (
	"slices"

	"github.com/actorlb/actorlb/maps"
)

// The ID sets of a rebuild, each shaped for the common case: backendSet (the
// backends of one family, rules 4 to 6), idMarks (rule 6) and firstSeen
// (the backends already in a service's slots, rule 5).

// backendSet holds the backend entries of one family during a rebuild, by
// ID. Backend IDs are handed out from 1 upward, so they are usually dense:
// then the set is an array indexed by ID (a lookup is one load, and the IDs
// come out sorted for free). Sparse IDs fall back to a map.
type backendSet struct {
	vals []maps.BackendValue // dense: vals[id]
	has  []bool
	m    map[uint32]maps.BackendValue // sparse
	n    int
}

// newBackendSet indexes es, keeping the least value (compareBackend) of a
// repeated ID; unmap turns IPv4-mapped addresses into IPv4 ones.
func newBackendSet(es maps.Entries[maps.BackendEntry], unmap bool) backendSet {
	buf := make([]maps.BackendEntry, min(maps.ChunkLen, es.Len())) // each pass decodes the entries a chunk at a time into it
	var maxID uint32
	for chunk := range es.Chunks(buf) {
		for i := range chunk {
			maxID = max(maxID, chunk[i].ID)
		}
	}
	var s backendSet
	if uint64(maxID) <= 4*uint64(es.Len())+4096 {
		s.vals = make([]maps.BackendValue, int(maxID)+1)
		s.has = make([]bool, int(maxID)+1)
	} else {
		s.m = make(map[uint32]maps.BackendValue, es.Len())
	}
	for chunk := range es.Chunks(buf) {
		for i := range chunk {
			e := &chunk[i]
			v := e.Value
			if unmap {
				v.Address = v.Address.Unmap()
			}
			if cur, dup := s.get(e.ID); dup && compareBackend(cur, v) <= 0 {
				continue
			}
			s.set(e.ID, v)
		}
	}
	return s
}

func (s *backendSet) get(id uint32) (maps.BackendValue, bool) {
	if s.m != nil || s.vals == nil {
		v, ok := s.m[id]
		return v, ok
	}
	if int(id) < len(s.has) && s.has[id] {
		return s.vals[id], true
	}
	return maps.BackendValue{}, false
}

func (s *backendSet) set(id uint32, v maps.BackendValue) {
	if s.m != nil {
		if _, ok := s.m[id]; !ok {
			s.n++
		}
		s.m[id] = v
		return
	}
	if !s.has[id] {
		s.n++
	}
	s.vals[id], s.has[id] = v, true
}

func (s *backendSet) drop(id uint32) {
	if s.m != nil || s.vals == nil {
		if _, ok := s.m[id]; ok {
			delete(s.m, id)
			s.n--
		}
		return
	}
	if int(id) < len(s.has) && s.has[id] {
		s.has[id] = false
		s.vals[id] = maps.BackendValue{}
		s.n--
	}
}

// sortedIDs returns the IDs in the set, ascending.
func (s *backendSet) sortedIDs() []uint32 {
	out := make([]uint32, 0, s.n)
	if s.m != nil || s.vals == nil {
		for id := range s.m {
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}
	for id, ok := range s.has {
		if ok {
			out = append(out, uint32(id))
		}
	}
	return out
}

// idMarks marks IDs of a backendSet: an array indexed by ID when the set
// is dense, a map otherwise.
type idMarks struct {
	dense []bool
	m     map[uint32]bool
}

// marks returns an empty idMarks shaped for the IDs of s.
func (s *backendSet) marks() idMarks {
	if s.m != nil || s.vals == nil {
		return idMarks{m: make(map[uint32]bool, s.n)}
	}
	return idMarks{dense: make([]bool, len(s.has))}
}

func (u idMarks) mark(id uint32) {
	if u.m != nil {
		u.m[id] = true
	} else if int(id) < len(u.dense) {
		u.dense[id] = true
	}
}

func (u idMarks) has(id uint32) bool {
	if u.m != nil {
		return u.m[id]
	}
	return int(id) < len(u.dense) && u.dense[id]
}

// firstSeen is a small set of backend IDs with a value each: an array up
// to 16 entries (most services, no allocation), a map beyond.
type firstSeen[V any] struct {
	n    int
	ids  [16]uint32
	vals [16]V
	m    map[uint32]V // past 16
}

func (f *firstSeen[V]) get(id uint32) (V, bool) {
	if f.m != nil {
		v, ok := f.m[id]
		return v, ok
	}
	for i, x := range f.ids[:f.n] {
		if x == id {
			return f.vals[i], true
		}
	}
	var zero V
	return zero, false
}

func (f *firstSeen[V]) put(id uint32, v V) {
	if f.m == nil && f.n < len(f.ids) {
		f.ids[f.n], f.vals[f.n] = id, v
		f.n++
		return
	}
	if f.m == nil {
		f.m = make(map[uint32]V, 2*f.n)
		for i, x := range f.ids[:f.n] {
			f.m[x] = f.vals[i]
		}
	}
	f.m[id] = v
}
