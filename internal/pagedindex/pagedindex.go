package pagedindex

import "math/bits"

// Key is what an Index is keyed by: an integer whose keys in use come
// mostly in runs (IDs handed out in order, addresses given out from a
// range), the run's place in its low bits.
type Key interface{ ~uint16 | ~uint32 | ~uint64 }

// Index is a map from K to V that keeps runs of keys in pages: a range
// of 64 consecutive keys (a key's bits but the low six) that holds
// promoteAt entries or more gets a page of 64 values with a bitmap of
// those present, a value's own size per entry where a Go map slot with
// its control byte and spare room takes about twice that, and the
// entries of one run share a page rather than each probing a table of
// many megabytes (a cache miss each). A key whose range holds few others
// is kept loose, in a map, so that entries that outlive their neighbours
// do not keep pages of holes: a range gets a page once promoteAt of its
// keys are loose (New's, which counts them; NewSparse's, which does not,
// see there), and loses it when fewer than demoteBelow are left. It
// behaves exactly as a map. Not safe for concurrent use.
type Index[K Key, V any] struct {
	pages map[K]*valPage[V] // by page number (key >> pageShift)
	loose map[K]V           // the entries of ranges without a page
	// looseIn counts the loose entries of each range that has some; nil
	// in a sparse index (NewSparse), which counts them in recent instead.
	looseIn map[K]uint8
	// recent counts the loose entries set lately in a few ranges (a sparse
	// index's: nil otherwise), by a hash of the range: a count never
	// exceeds the range's loose entries (a slot taken by another range
	// starts again from one), so a range promoted on it has promoteAt
	// entries or more.
	recent *[recentSlots]recentRange[K]
	n      int
	// the last page used: the entries of one request are mostly one run
	// of keys
	last   *valPage[V]
	lastNo K
	// spare is the page of the last range that went loose, zeroed, for
	// the next range that gets a page: IDs are taken and freed in ranges
	// that come and go (an upsert and a delete of a service of ten
	// backends made and dropped a page every dozen calls or so).
	spare *valPage[V]
	// empty is the range the last get that missed found without a page
	// and without loose entries (emptyOK: known), so that the gets of a
	// request's new IDs, which come in runs, probe the maps once a range
	// rather than twice an ID. A set forgets it: only a set puts an entry
	// into a range (a page prepare makes holds the range's loose entries,
	// and an empty range has none).
	empty   K
	emptyOK bool
}

const (
	pageShift   = 6
	pageSize    = 1 << pageShift
	promoteAt   = 16 // loose entries of a range that make it a page
	demoteBelow = 8  // entries of a page under which it goes loose
)

// recentSlots is the size of a sparse index's table of recent ranges, a
// power of two (recentShift its log): 16 KB for 64-bit keys, room for the
// ranges a batch fills together when its services' pods are spread over
// a few hundred nodes (each node's range filled in order, the nodes
// interleaved). With 64 slots of one way, 200 such ranges took each
// other's slots and none got a page
// (TestPagedIndexSparsePagesRunsOfManyRangesSetInterleaved); every key
// then cost two map probes, a page's and its own, where a page costs one
// for 64 keys.
const (
	recentShift = 10
	recentSlots = 1 << recentShift
)

// recentRange is a slot of recent: range no's loose entries counted
// since it took the slot (ok: taken).
type recentRange[K Key] struct {
	no K
	c  uint8
	ok bool
}

// valPage is one range of 64 IDs: the values of those present.
type valPage[V any] struct {
	vals [pageSize]V
	used uint64
}

// New returns an empty index with room for n keys, which counts the
// loose entries of every range that has some (a map entry a range): for
// keys that come in runs by design (IDs an allocator hands out in order).
func New[K Key, V any](n int) *Index[K, V] {
	return &Index[K, V]{
		pages:   make(map[K]*valPage[V], n/pageSize+1),
		loose:   map[K]V{},
		looseIn: map[K]uint8{},
	}
}

// NewSparse returns an empty index with room for n keys, for keys that
// may as well be scattered (addresses: a node's pods are a run, a service
// with a pod on each of many nodes is not): it keeps no count per range,
// so that a loose entry costs what it would in a Go map alone. A range
// gets a page from Prepare (a run of promoteAt keys set together), or once
// promoteAt loose entries of it are set while it holds its slot in a table
// of recent ranges (keys set one by one, in runs, of one range or of a few
// hundred interleaved: recentSlots, recentOf); it loses its
// page as in New's. Gets of a missing key probe the pages and the loose
// entries (no negative cache: that needs the counts).
func NewSparse[K Key, V any](n int) *Index[K, V] {
	return &Index[K, V]{
		pages:  make(map[K]*valPage[V], n/pageSize+1),
		loose:  map[K]V{},
		recent: new([recentSlots]recentRange[K]),
	}
}

// recentOf returns range no's slot in recent: each range has two, side by
// side (a hash picks the pair), and gets the one that holds it, else the
// one to take: an empty one, else the one counting fewer entries. With one
// slot, two ranges filled together that hash alike took it from each other
// at every set and neither got its page.
func (x *Index[K, V]) recentOf(no K) *recentRange[K] {
	i := (uint64(no) * 0x9e3779b97f4a7c15) >> (64 - recentShift) &^ 1
	a, b := &x.recent[i], &x.recent[i+1]
	switch {
	case a.ok && a.no == no:
		return a
	case b.ok && b.no == no:
		return b
	case !a.ok || (b.ok && a.c <= b.c):
		return a
	}
	return b
}

// page returns page no, or nil.
func (x *Index[K, V]) page(no K) *valPage[V] {
	if x.last != nil && x.lastNo == no {
		return x.last
	}
	p := x.pages[no]
	if p != nil {
		x.last, x.lastNo = p, no
	}
	return p
}

// Get returns the value of k and whether k is in the index.
func (x *Index[K, V]) Get(k K) (V, bool) {
	no := k >> pageShift
	if x.emptyOK && x.empty == no {
		var zero V
		return zero, false
	}
	if p := x.page(no); p != nil {
		i := k & (pageSize - 1)
		return p.vals[i], p.used&(1<<i) != 0
	}
	v, ok := x.loose[k]
	if !ok && x.looseIn != nil && x.looseIn[no] == 0 {
		x.empty, x.emptyOK = no, true
	}
	return v, ok
}

// Prepare readies the index for the sets of n keys, key(i) in the order
// they will be set: a range without a page that will hold promoteAt
// entries or more once they are set gets its page now, with the loose
// entries it has, so that those sets go straight to the page instead of
// each going loose first (two map writes and a count) and the range then
// moving over. Only consecutive keys of one range count together; the
// sets must follow before any Delete.
func (x *Index[K, V]) Prepare(n int, key func(int) K) {
	for i := 0; i < n; {
		no := key(i) >> pageShift
		var in uint64 // the range's slots the run sets
		for ; i < n; i++ {
			k := key(i)
			if k>>pageShift != no {
				break
			}
			in |= 1 << (k & (pageSize - 1))
		}
		x.prepareRange(no, in)
	}
}

// prepareRange gives range no a page if it has none and will hold
// promoteAt entries once the slots in are set.
func (x *Index[K, V]) prepareRange(no K, in uint64) {
	if x.page(no) != nil {
		return
	}
	loose := x.looseIn[no]
	if loose > 0 {
		for u := in; u != 0; u &= u - 1 {
			if _, ok := x.loose[no<<pageShift|K(bits.TrailingZeros64(u))]; ok {
				in &^= u & -u // set already: counted in loose
			}
		}
	}
	if bits.OnesCount64(in)+int(loose) >= promoteAt {
		x.promote(no)
	}
}

// Set sets the value of k: in its range's page, or loose (the range
// paged once it holds promoteAt loose entries, see New and NewSparse).
func (x *Index[K, V]) Set(k K, v V) {
	x.emptyOK = false
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
	if x.recent != nil {
		r := x.recentOf(no)
		if !r.ok || r.no != no {
			*r = recentRange[K]{no: no, c: 1, ok: true}
			return
		}
		if r.c++; r.c >= promoteAt {
			x.promote(no)
		}
		return
	}
	if c := x.looseIn[no] + 1; c < promoteAt {
		x.looseIn[no] = c
		return
	}
	x.promote(no)
}

// promote gives range no a page of its own, its loose entries moving to
// it.
func (x *Index[K, V]) promote(no K) {
	p := x.spare
	if p != nil {
		x.spare = nil
	} else {
		p = &valPage[V]{}
	}
	if x.recent != nil {
		if r := x.recentOf(no); r.ok && r.no == no {
			*r = recentRange[K]{}
		}
	}
	if x.looseIn == nil || x.looseIn[no] > 0 { // else the range has nothing loose to move
		for i := K(0); i < pageSize; i++ {
			if v, ok := x.loose[no<<pageShift|i]; ok {
				p.vals[i] = v
				p.used |= 1 << i
				delete(x.loose, no<<pageShift|i)
			}
		}
		delete(x.looseIn, no)
	}
	x.pages[no] = p
}

// Delete removes k (nothing if absent); a page left with fewer than
// demoteBelow entries goes loose.
func (x *Index[K, V]) Delete(k K) {
	no := k >> pageShift
	p := x.page(no)
	if p == nil {
		if _, ok := x.loose[k]; !ok {
			return
		}
		delete(x.loose, k)
		x.n--
		if x.recent != nil {
			if r := x.recentOf(no); r.ok && r.no == no && r.c > 0 {
				r.c--
			}
			return
		}
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
	for j := K(0); j < pageSize; j++ {
		if p.used&(1<<j) != 0 {
			x.loose[no<<pageShift|j] = p.vals[j]
		}
	}
	if left > 0 && x.looseIn != nil {
		x.looseIn[no] = uint8(left)
	}
	delete(x.pages, no)
	if x.last == p {
		x.last = nil
	}
	*p = valPage[V]{}
	x.spare = p
}

// Len returns the number of keys.
func (x *Index[K, V]) Len() int { return x.n }

// All yields every key and its value, in no order. The index must not
// change during the iteration.
func (x *Index[K, V]) All(yield func(K, V) bool) {
	for no, p := range x.pages {
		for u := p.used; u != 0; u &= u - 1 {
			i := K(bits.TrailingZeros64(u))
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
