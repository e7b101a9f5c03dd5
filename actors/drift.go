package actors

import (
	"errors"
	"fmt"
	"slices"

	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// diffEntries compares what a map holds (got) with what its owner wrote
// (want) and returns the writes and deletes that make the map equal again,
// with what they repair counted in d. Writes come in want's order; a key
// the dump repeats counts once.
func diffEntries[E, K comparable](got, want []E, key func(E) K) (writes []E, deletes []K, d messages.Drift) {
	held := make(map[K]E, len(got))
	for _, e := range got {
		held[key(e)] = e
	}
	for _, e := range want {
		k := key(e)
		cur, ok := held[k]
		switch {
		case !ok:
			d.Missing++
			writes = append(writes, e)
		case cur != e:
			d.Changed++
			writes = append(writes, e)
		}
		delete(held, k)
	}
	for k := range held {
		d.Extra++
		deletes = append(deletes, k)
	}
	return writes, deletes, d
}

// A drift check (a reconcile) of a map compares it with what its owner
// wrote (the mirror) and repairs the difference. It runs in parts, so
// that the owner goes on writing meanwhile and no message of the owner's
// takes long: begin (in the owner: the pin checked, and from then on every
// key the owner writes or deletes noted), read (on a goroutine of its own:
// the dump, which reads only the map, tens of milliseconds of system calls
// for 10k services of 10 backends), then, in the owner again, the
// comparison a step at a time (stepEntries entries a message, the owner's
// other messages between two steps) and finish (the counts compared, and
// the repairs written if anything drifted).
//
// A key the owner wrote while the map was read (between begin and the end
// of read: frozen) may have been read before or after the write: it is
// left out. A key the owner writes after that, while the comparison goes
// on, was read before: its entry is compared with what the mirror held
// before the owner's first such write (late). Every other key is compared
// with the mirror, where it is as it was at begin. The map holds what the
// mirror held when the dump entries left in are exactly the mirror's
// entries left in: each accepted, under distinct keys, as many as the
// mirror held when the read ended, less the frozen keys it held.
//
// driftCheck is one in flight, of one map or several (pairCheck).
type driftCheck interface {
	read()                    // off the owner
	readDone()                // in the owner, once read has returned
	step(budget int) int      // in the owner: compares up to budget entries, returns what is left of budget (0: maybe more to do)
	finish() []messages.Drift // in the owner, once step has left budget
}

// stepEntries is how many dump entries a step of a drift check compares:
// some 0.5-1 ms of the owner's time for service entries (a decode, an
// encode and a mirror lookup an entry).
const stepEntries = 1024

// mapCheck is the drift check of one mirror's map; K is the map's key.
type mapCheck[E, K comparable] struct {
	m maps.Map[E, K]
	d messages.Drift
	// frozen is the keys written or deleted from begin to the end of the
	// read (readDone); late (nil until readDone) the keys written after,
	// not frozen, each with what the mirror held before the owner's first
	// write of it. Together they are every key written since begin.
	frozen map[K]struct{}
	late   map[K]lateEntry[E]
	// reloaded is set when the mirror was read again from the map since
	// begin (after a failed write): it is the map then, and nothing is
	// checked.
	reloaded bool
	got      maps.Read[E]
	err      error
	// The comparison: the next entry (chunk, at), the entries accepted so
	// far, the mirror's count to match, and whether an entry was refused.
	chunk, at, accepted, count int
	refused                    bool
	// The mirror's side: how many entries it holds, whether it holds an
	// entry (or a key), all its entries, an entry's key.
	n       func() int
	has     func(E) bool
	holdsK  func(K) bool
	all     func() []E
	keyOf   func(E) K
	release func() // the mirror forgets the check (finish)
}

// lateEntry is what a mirror held of a key before its owner's first
// write of it after the read.
type lateEntry[E any] struct {
	e   E
	had bool
}

// beginCheck is begin for the map m of a mirror: it checks the pin.
func beginCheck[E, K comparable](m maps.Map[E, K]) *mapCheck[E, K] {
	c := &mapCheck[E, K]{m: m, d: messages.Drift{Map: m.Name()}, frozen: map[K]struct{}{}}
	c.d.Pin, c.d.Err = checkPin(m)
	return c
}

// writing reports whether the owner must tell c what it writes (wrote).
func (c *mapCheck[E, K]) writing() bool { return c != nil && !c.reloaded }

// reload notes that the mirror was read again from the map (c may be nil:
// no check in flight).
func (c *mapCheck[E, K]) reload() {
	if c != nil {
		c.reloaded = true
	}
}

// wrote notes that the owner is about to write or delete k, whose entry
// in the mirror is old (had: it has one).
func (c *mapCheck[E, K]) wrote(k K, old E, had bool) {
	if c.late == nil {
		c.frozen[k] = struct{}{}
		return
	}
	if _, ok := c.frozen[k]; ok {
		return
	}
	if _, ok := c.late[k]; !ok {
		c.late[k] = lateEntry[E]{old, had}
	}
}

func (c *mapCheck[E, K]) read() { c.got, c.err = c.m.Read() }

// readDone freezes the keys written while the map was read, and the
// mirror's count to match.
func (c *mapCheck[E, K]) readDone() {
	c.late = map[K]lateEntry[E]{}
	if c.err != nil || c.reloaded {
		return
	}
	c.count = c.n()
	for k := range c.frozen {
		if c.holdsK(k) {
			c.count--
		}
	}
	c.refused = !c.got.Distinct()
}

func (c *mapCheck[E, K]) step(budget int) int {
	if c.err != nil || c.reloaded {
		return budget
	}
	for !c.refused && c.chunk < c.got.NumChunks() && budget > 0 {
		to := min(c.got.ChunkEntries(c.chunk), c.at+budget)
		budget -= to - c.at
		c.refused = !c.got.Check(c.chunk, c.at, to, func(e E, canonical bool) bool {
			k := c.keyOf(e)
			if _, ok := c.frozen[k]; ok {
				return true
			}
			if l, ok := c.late[k]; ok {
				if !l.had || l.e != e {
					return false
				}
			} else if !c.has(e) {
				return false
			}
			c.accepted++
			return canonical && c.accepted <= c.count
		})
		if c.at = to; c.at == c.got.ChunkEntries(c.chunk) {
			c.chunk, c.at = c.chunk+1, 0
		}
	}
	if c.refused || c.chunk == c.got.NumChunks() {
		return max(budget, 1) // nothing more to do
	}
	return 0
}

func (c *mapCheck[E, K]) finish() []messages.Drift { return []messages.Drift{c.result()} }

// result is finish for one map. The common case, where nothing drifted,
// built nothing; only when a step refused an entry, or the counts differ
// (or the dump may repeat a key), is the dump compared exactly
// (diffEntries, which indexes it), with every key the owner wrote since
// begin left out on both sides, and the repairs written: writes first,
// then deletes (make-before-break: a service slot never points at a
// backend that is written after it). The mirror is not changed: it is
// what was written, the map is what drifted.
func (c *mapCheck[E, K]) result() messages.Drift {
	c.release()
	d := c.d
	if c.err != nil {
		d.Err = errors.Join(d.Err, c.err)
		return d
	}
	if c.reloaded || (!c.refused && c.accepted == c.count) {
		return d
	}
	skip := func(e E) bool { // written since begin
		k := c.keyOf(e)
		_, frozen := c.frozen[k]
		_, late := c.late[k]
		return frozen || late
	}
	got := slices.DeleteFunc(c.got.Slice(), skip)
	want := slices.DeleteFunc(c.all(), skip)
	ws, ds, diff := diffEntries(got, want, c.keyOf)
	d.Missing, d.Changed, d.Extra = diff.Missing, diff.Changed, diff.Extra
	if err := c.m.Update(ws); err != nil {
		d.Err = errors.Join(d.Err, err)
		return d
	}
	if err := c.m.Delete(ds); err != nil {
		d.Err = errors.Join(d.Err, err)
	}
	return d
}

// pairCheck is the drift check of two maps (an owner of both families).
type pairCheck struct{ a, b driftCheck }

func (p pairCheck) read() {
	p.a.read()
	p.b.read()
}

func (p pairCheck) readDone() {
	p.a.readDone()
	p.b.readDone()
}

func (p pairCheck) step(budget int) int {
	if budget = p.a.step(budget); budget == 0 {
		return 0
	}
	return p.b.step(budget)
}

func (p pairCheck) finish() []messages.Drift { return append(p.a.finish(), p.b.finish()...) }

// checkNow runs a whole drift check in the caller (tests).
func checkNow(c driftCheck) []messages.Drift {
	c.read()
	c.readDone()
	for c.step(stepEntries) == 0 {
	}
	return c.finish()
}

// checkPin checks a map's pin and pins the map again when the pin was
// removed or replaced. A pin that could not be checked is not repaired
// (its state is reported as it was last known: ok) and its error is
// returned; the entries are reconciled all the same.
func checkPin(m interface {
	CheckPin() (maps.PinState, error)
	Repin() error
}) (maps.PinState, error) {
	st, err := m.CheckPin()
	if err != nil {
		return maps.PinOK, err
	}
	if st == maps.PinMissing || st == maps.PinReplaced {
		if err := m.Repin(); err != nil {
			return st, fmt.Errorf("pin %s: %w", st, err)
		}
	}
	return st, nil
}

// beginCheck begins a drift check of the mirror's map (see driftCheck).
func (o *mirror[E, K, V]) beginCheck() driftCheck {
	o.index()
	c := beginCheck(o.m)
	c.n = func() int { return o.entries.len() }
	c.has = o.holds
	c.holdsK = func(k K) bool { _, ok := o.entries.get(k); return ok }
	c.all = o.collect
	c.keyOf = func(e E) K { k, _ := o.split(e); return k }
	c.release = func() { o.check = nil }
	o.check = c
	return c
}

// reconcile is a whole drift check of the mirror's map, in the caller.
func (o *mirror[E, K, V]) reconcile() messages.Drift { return checkNow(o.beginCheck())[0] }

// holds reports whether the mirror holds e, exactly as its owner would
// write it.
func (o *mirror[E, K, V]) holds(e E) bool {
	k, _ := o.split(e)
	v, ok := o.entries.get(k)
	return ok && o.join(k, v) == e
}

// beginCheck begins a drift check of the service mirror's map.
func (o *svcMirror) beginCheck() driftCheck {
	o.index()
	c := beginCheck(maps.Map[maps.ServiceEntry, maps.ServiceKey](o.m))
	// A cursor caches a frontend's slots, which the owner's writes
	// between two steps may replace: each lookup has one of its own (a
	// dump comes in the kernel's hash order, a frontend's slots
	// scattered over it, so a cursor kept would seldom be reused).
	c.n = func() int { return o.n }
	c.has = func(e maps.ServiceEntry) bool { cur := cursor{o: o}; return cur.holds(e) }
	c.holdsK = func(k maps.ServiceKey) bool { cur := cursor{o: o}; _, ok := cur.get(k); return ok }
	c.all = o.collect
	c.keyOf = func(e maps.ServiceEntry) maps.ServiceKey { return e.Key }
	c.release = func() { o.check = nil }
	o.check = c
	return c
}

// reconcile is a whole drift check of the service mirror's map, in the
// caller.
func (o *svcMirror) reconcile() messages.Drift { return checkNow(o.beginCheck())[0] }
