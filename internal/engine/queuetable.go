package engine

import (
	"math/bits"
	"math/rand/v2"
	"net/netip"

	"github.com/actorlb/actorlb/internal/addrkey"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// queueTable maps queue keys to their queues. Each upsert enters the queue
// of its frontend and of each backend and leaves it when it completes: a
// lookup, a store and a delete per key, where a Go map keyed by the 22-byte
// key hashes it with memhash, matches control bytes and leaves tombstones
// that grow its table (a micro benchmark on the bench machine, 8,800 keys
// in flight as in the batched bulk: some 140-170 ns a key for the three).
//
// Here the keys of IPv4 addresses (nearly all: a cluster's) are packed
// into a word, the address lowest (packQueueKey), and kept in a hash table
// of open addressing (linear probing; a delete moves the entries after it
// back, so nothing is left behind) whose hash keeps runs together: the
// keys of one block of queueBlock consecutive addresses start their probes
// in queueBlock consecutive slots, so that a service's backends, which an
// allocator of pod addresses gives out in runs, are a cache line or two
// rather than a miss each. Every other key is kept whole in a Go map. A
// key is in one of the two, never both.
//
// The zero table is empty and ready.
type queueTable struct {
	slots []queueSlot // a power of two long (at least queueBlock), or nil
	n     int         // slots in use
	seed  uint64      // drawn when the slots are made
	rest  map[qkey]queue
}

// queueSlot is one entry of the open table: empty when its queue has no
// head (set never stores one without).
type queueSlot struct {
	key uint64 // packQueueKey's
	q   queue
}

const (
	queueBlockShift = 3
	queueBlock      = 1 << queueBlockShift
	queueSlotsMin   = 64
)

// newQueueTable returns an empty table with room for n keys.
func newQueueTable(n int) queueTable {
	var t queueTable
	if n > 0 {
		t.make(queueSlotsFor(n))
	}
	return t
}

// queueSlotsFor is the number of slots for n keys: the least power of two
// of at least twice n (the table grows once more than half full).
func queueSlotsFor(n int) int {
	s := queueSlotsMin
	for s < 2*n {
		s <<= 1
	}
	return s
}

func (t *queueTable) make(size int) {
	t.slots = make([]queueSlot, size)
	t.seed = rand.Uint64()
}

// home is the slot p's probe starts at: its block's place (a hash of the
// block number with the table's seed, to a multiple of queueBlock), plus
// its place in the block. The seed is drawn for each table, so that no
// client can choose addresses that pile up on one probe run.
func (t *queueTable) home(p uint64) int {
	hi, lo := bits.Mul64(p>>queueBlockShift^t.seed, 0x9e3779b97f4a7c15)
	mask := uint64(len(t.slots) - 1)
	return int((hi^lo)&mask&^(queueBlock-1) | p&(queueBlock-1))
}

// find returns the slot of p, or the empty slot where its probe ends (and
// false). The table must have slots.
func (t *queueTable) find(p uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(p); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.q.head == nil {
			return i, false
		}
		if s.key == p {
			return i, true
		}
	}
}

// packQueueKey packs k into a word when its address is IPv4 and its scope
// fits 7 bits: the address in the low 32 bits, then the port, the
// protocol, the scope, and whether it is a backend's in the top bit.
func packQueueKey(k *qkey) (uint64, bool) {
	a, ok := k.IP.V4()
	if !ok || k.scope >= 1<<7 {
		return 0, false
	}
	p := uint64(a) | uint64(k.port)<<32 | uint64(k.proto)<<48 | uint64(k.scope)<<56
	if k.backend {
		p |= 1 << 63
	}
	return p, true
}

// unpackQueueKey is the key packQueueKey packed into p.
func unpackQueueKey(p uint64) qkey {
	a := uint32(p)
	return qkey{
		IP:      addrkey.IPOf(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})),
		port:    uint16(p >> 32),
		proto:   lb.L4Type(p >> 48),
		scope:   lb.Scope(p >> 56 & (1<<7 - 1)),
		backend: p>>63 != 0,
	}
}

// len is the number of keys in the table.
func (t *queueTable) len() int { return t.n + len(t.rest) }

// get returns the queue of k (the zero queue, no head, if k has none).
func (t *queueTable) get(k qkey) queue {
	p, ok := packQueueKey(&k)
	if !ok {
		return t.rest[k]
	}
	if t.n == 0 {
		return queue{}
	}
	if i, ok := t.find(p); ok {
		return t.slots[i].q
	}
	return queue{}
}

// set makes q the queue of k. q must have a head (a queue without one is
// deleted, not set: get tells an absent key by its queue's nil head).
func (t *queueTable) set(k qkey, q queue) {
	if q.head == nil {
		panic("engine: queueTable.set of a queue without a head")
	}
	p, ok := packQueueKey(&k)
	if !ok {
		if t.rest == nil {
			t.rest = map[qkey]queue{}
		}
		t.rest[k] = q
		return
	}
	if t.slots == nil {
		t.make(queueSlotsMin)
	}
	i, found := t.find(p)
	if found {
		t.slots[i].q = q
		return
	}
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
		i, _ = t.find(p)
	}
	t.slots[i] = queueSlot{key: p, q: q}
	t.n++
}

// grow doubles the slots and puts every key in its place among them.
func (t *queueTable) grow() {
	old := t.slots
	t.make(2 * len(old))
	for i := range old {
		if s := &old[i]; s.q.head != nil {
			j, _ := t.find(s.key)
			t.slots[j] = *s
		}
	}
}

// del removes k from the table (nothing if it has no queue). The keys
// after it in its probe run move back so that each is still found from
// its home without crossing an empty slot.
func (t *queueTable) del(k qkey) {
	p, ok := packQueueKey(&k)
	if !ok {
		delete(t.rest, k)
		return
	}
	if t.n == 0 {
		return
	}
	i, found := t.find(p)
	if !found {
		return
	}
	t.n--
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &t.slots[j]
		if s.q.head == nil {
			break
		}
		// s may fill the hole at i unless its home lies cyclically in
		// (i, j]: then its probe starts after the hole.
		if h := t.home(s.key); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = queueSlot{}
}

// all yields every key and its queue, in no particular order. The table
// must not change while it runs.
func (t *queueTable) all(yield func(qkey, queue) bool) {
	for i := range t.slots {
		if s := &t.slots[i]; s.q.head != nil && !yield(unpackQueueKey(s.key), s.q) {
			return
		}
	}
	for k, q := range t.rest {
		if !yield(k, q) {
			return
		}
	}
}
