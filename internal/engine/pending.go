package engine

// pendingTable holds the requests awaiting a reply, by request ID. It is a
// slab, not a map: an ID is a slot index plus the slot's generation, so a
// lookup is an index, a late reply to a reused slot is told apart, and a
// warm table allocates nothing. (Thousands of requests are in flight
// during a batch.)
type pendingTable struct {
	slots []pendingSlot
	free  []uint32
	n     int
	// spare are answered requests kept for the next ones (take, recycle).
	spare []*pendingReq
}

// reqsKept bounds the answered requests the table keeps for reuse.
const reqsKept = 256

// take returns a zero request: a spare one, or a new one.
func (t *pendingTable) take() *pendingReq {
	if n := len(t.spare); n > 0 {
		p := t.spare[n-1]
		t.spare[n-1] = nil
		t.spare = t.spare[:n-1]
		return p
	}
	return new(pendingReq)
}

// recycle keeps p, answered and out of the table, for reuse, unless it is
// still in an outbox (sent again and not yet sent there: an outbox's
// requests are those not sent) or enough are kept. The caller no longer
// reads p.
func (t *pendingTable) recycle(p *pendingReq) {
	if !p.sent || len(t.spare) >= reqsKept {
		return
	}
	*p = pendingReq{}
	t.spare = append(t.spare, p)
}

type pendingSlot struct {
	gen uint32
	p   *pendingReq // nil: free, or reserved and not yet set
}

// reserve takes a slot and returns its ID (never 0).
func (t *pendingTable) reserve() uint64 {
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		t.slots = append(t.slots, pendingSlot{})
		i = uint32(len(t.slots) - 1)
	}
	t.slots[i].gen++
	return uint64(t.slots[i].gen)<<32 | uint64(i+1)
}

func (t *pendingTable) slot(id uint64) *pendingSlot {
	i := id&0xffffffff - 1
	if i >= uint64(len(t.slots)) || uint64(t.slots[i].gen) != id>>32 {
		return nil
	}
	return &t.slots[i]
}

// set stores p under id (from reserve).
func (t *pendingTable) set(id uint64, p *pendingReq) {
	if s := t.slot(id); s != nil && s.p == nil {
		s.p = p
		t.n++
	}
}

// get returns the request of id, if it still awaits its reply.
func (t *pendingTable) get(id uint64) (*pendingReq, bool) {
	if s := t.slot(id); s != nil && s.p != nil {
		return s.p, true
	}
	return nil, false
}

// del frees the slot of id.
func (t *pendingTable) del(id uint64) {
	s := t.slot(id)
	if s == nil || s.p == nil {
		return
	}
	s.p = nil
	t.n--
	t.free = append(t.free, uint32(id&0xffffffff-1))
}

// all yields every request awaiting its reply.
func (t *pendingTable) all(yield func(uint64, *pendingReq) bool) {
	for i := range t.slots {
		if p := t.slots[i].p; p != nil {
			if !yield(uint64(t.slots[i].gen)<<32|uint64(i+1), p) {
				return
			}
		}
	}
}

// len is the number of requests awaiting replies.
func (t *pendingTable) len() int { return t.n }
