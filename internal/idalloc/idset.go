package idalloc

// idSet is a set of IDs as a paged bitmap: 4,096 IDs per page, a page
// only while it has a member. IDs are handed out mostly in order, so the
// members of a set share few pages: about one bit per ID, where a map
// from ID to key cost tens of bytes.
type idSet struct {
	pages map[uint64]*idPage
	n     int
	spare *idPage // the last page emptied, reused by the next new page
}

const pageBits = 12 // 4,096 IDs per page

type idPage struct {
	bits [1 << pageBits / 64]uint64
	n    int
}

func split(id uint64) (page uint64, word int, bit uint64) {
	return id >> pageBits, int(id>>6) & (1<<pageBits/64 - 1), 1 << (id & 63)
}

func (s *idSet) has(id uint64) bool {
	p, w, b := split(id)
	pg := s.pages[p]
	return pg != nil && pg.bits[w]&b != 0
}

func (s *idSet) add(id uint64) {
	p, w, b := split(id)
	if s.pages == nil {
		s.pages = map[uint64]*idPage{}
	}
	pg := s.pages[p]
	if pg == nil {
		if pg = s.spare; pg != nil {
			s.spare = nil // empty: its bits were cleared one by one
		} else {
			pg = &idPage{}
		}
		s.pages[p] = pg
	}
	if pg.bits[w]&b == 0 {
		pg.bits[w] |= b
		pg.n++
		s.n++
	}
}

func (s *idSet) remove(id uint64) {
	p, w, b := split(id)
	pg := s.pages[p]
	if pg == nil || pg.bits[w]&b == 0 {
		return
	}
	pg.bits[w] &^= b
	pg.n--
	s.n--
	if pg.n == 0 {
		delete(s.pages, p)
		s.spare = pg
	}
}

func (s *idSet) len() int { return s.n }
