package actors

import "math/bits"

// pagedIndex is a backend mirror's index by backend ID. The allocator
// hands backend IDs out in cursor order, so the IDs in use are mostly
// runs: they are kept in pages of 64 values with a bitmap of those
// present, a value's own size per backend (12 bytes for an IPv4 backend)
// where a Go map slot with its control byte and spare room takes about
// twice that. An ID whose page holds few others is kept loose, in a map,
// so that backends that outlive their neighbours do not keep pages of
// holes: a range gets a page once promoteAt of its IDs are loose, and
// loses it when fewer than demoteBelow are left. It behaves exactly as a
// map. Not safe for concurrent use.
type pagedIndex[V comparable] struct {
	pages map[uint32]*valPage[V] // by page number (ID >> pageShift)
	loose map[uint32]V           // the entries of ranges without a page
	// looseIn counts the loose entries of each range that has some.
	looseIn map[uint32]uint8
	n       int
	// the last page used: the entries of one request are mostly one run
	// of IDs
	last   *valPage[V]
	lastNo uint32
	// spare is the page of the last range that went loose, zeroed, for
	// the next range that gets a page: IDs are taken and freed in ranges
	// that come and go (an upsert and a delete of a service of ten
	// backends made and dropped a page every dozen calls or so).
	spare *valPage[V]
}

const (
	pageShift   = 6
	pageSize    = 1 << pageShift
	promoteAt   = 16 // loose entries of a range that make it a page
	demoteBelow = 8  // entries of a page under which it goes loose
)

// valPage is one range of 64 IDs: the values of those present.
type valPage[V comparable] struct {
	vals [pageSize]V
	used uint64
}

func newPagedIndex[V comparable](n int) *pagedIndex[V] {
	return &pagedIndex[V]{
		pages:   make(map[uint32]*valPage[V], n/pageSize+1),
		loose:   map[uint32]V{},
		looseIn: map[uint32]uint8{},
	}
}

// page returns page no, or nil.
func (x *pagedIndex[V]) page(no uint32) *valPage[V] {
	if x.last != nil && x.lastNo == no {
		return x.last
	}
	p := x.pages[no]
	if p != nil {
		x.last, x.lastNo = p, no
	}
	return p
}

func (x *pagedIndex[V]) get(k uint32) (V, bool) {
	if p := x.page(k >> pageShift); p != nil {
		i := k & (pageSize - 1)
		return p.vals[i], p.used&(1<<i) != 0
	}
	v, ok := x.loose[k]
	return v, ok
}

func (x *pagedIndex[V]) set(k uint32, v V) {
	no := k >> pageShift
	if p := x.page(no); p != nil {
		i := k & (pageSize - 1)
		if p.used&(1<<i) == 0 {
			p.used |= 1 << i
			x.n++
		}
		p.vals[i] = v
		return
	}
	if _, ok := x.loose[k]; ok {
		x.loose[k] = v
		return
	}
	x.loose[k] = v
	x.n++
	if c := x.looseIn[no] + 1; c < promoteAt {
		x.looseIn[no] = c
		return
	}
	// The range's loose entries move to a page of their own.
	p := x.spare
	if p != nil {
		x.spare = nil
	} else {
		p = &valPage[V]{}
	}
	for i := range uint32(pageSize) {
		if v, ok := x.loose[no<<pageShift|i]; ok {
			p.vals[i] = v
			p.used |= 1 << i
			delete(x.loose, no<<pageShift|i)
		}
	}
	delete(x.looseIn, no)
	x.pages[no] = p
}

func (x *pagedIndex[V]) del(k uint32) {
	no := k >> pageShift
	p := x.page(no)
	if p == nil {
		if _, ok := x.loose[k]; !ok {
			return
		}
		delete(x.loose, k)
		x.n--
		if c := x.looseIn[no] - 1; c == 0 {
			delete(x.looseIn, no)
		} else {
			x.looseIn[no] = c
		}
		return
	}
	i := k & (pageSize - 1)
	if p.used&(1<<i) == 0 {
		return
	}
	var zero V
	p.used &^= 1 << i
	p.vals[i] = zero
	x.n--
	left := bits.OnesCount64(p.used)
	if left >= demoteBelow {
		return
	}
	// Too few left for a page: they go loose.
	for j := range uint32(pageSize) {
		if p.used&(1<<j) != 0 {
			x.loose[no<<pageShift|j] = p.vals[j]
		}
	}
	if left > 0 {
		x.looseIn[no] = uint8(left)
	}
	delete(x.pages, no)
	if x.last == p {
		x.last = nil
	}
	*p = valPage[V]{}
	x.spare = p
}

func (x *pagedIndex[V]) len() int { return x.n }

func (x *pagedIndex[V]) all(yield func(uint32, V) bool) {
	for no, p := range x.pages {
		for u := p.used; u != 0; u &= u - 1 {
			i := uint32(bits.TrailingZeros64(u))
			if !yield(no<<pageShift|i, p.vals[i]) {
				return
			}
		}
	}
	for k, v := range x.loose {
		if !yield(k, v) {
			return
		}
	}
}
