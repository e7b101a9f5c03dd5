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
// wrote (the mirror) and repairs the difference. It runs in three parts,
// so that the owner goes on writing while the map is read: begin (in the
// owner: the pin checked, and from then on every key the owner writes or
// deletes noted), read (on a goroutine of its own: the dump, which reads
// only the map, tens of milliseconds of system calls for 10k services of
// 10 backends), finish (in the owner: the dump compared with the mirror,
// the keys written since begin left out on both sides, and the repairs
// written). A key the owner wrote meanwhile may be read before or after
// the write, so it is not checked this time; every other key is where it
// was when begin ran, unless someone else changed it: the drift.
//
// driftCheck is one in flight, of one map or several (pairCheck).
type driftCheck interface {
	read()                    // off the owner
	finish() []messages.Drift // in the owner, once read has returned
}

// mapCheck is the drift check of one mirror's map; K is the map's key.
type mapCheck[E, K comparable] struct {
	m       maps.Map[E, K]
	d       messages.Drift
	written map[K]struct{} // keys written or deleted since begin
	// reloaded is set when the mirror was read again from the map since
	// begin (after a failed write): it is the map then, and nothing is
	// checked.
	reloaded bool
	got      maps.Read[E]
	err      error
	// The mirror's side, read in finish: how many entries it holds,
	// whether it holds an entry (or a key), all its entries, an entry's key.
	n       func() int
	has     func(E) bool
	holdsK  func(K) bool
	want    func() []E
	keyOf   func(E) K
	release func() // the mirror forgets the check (finish)
}

// beginCheck is begin for the map m of a mirror: it checks the pin.
func beginCheck[E, K comparable](m maps.Map[E, K]) *mapCheck[E, K] {
	c := &mapCheck[E, K]{m: m, d: messages.Drift{Map: m.Name()}, written: map[K]struct{}{}}
	c.d.Pin, c.d.Err = checkPin(m)
	return c
}

// wrote notes that the owner wrote or deleted k.
func (c *mapCheck[E, K]) wrote(k K) {
	if c != nil {
		c.written[k] = struct{}{}
	}
}

func (c *mapCheck[E, K]) read() { c.got, c.err = c.m.Read() }

func (c *mapCheck[E, K]) finish() []messages.Drift { return []messages.Drift{c.result()} }

// result compares the dump with the mirror as finish does. The common
// case, where nothing drifted, builds nothing (Read.Holds); only when
// that finds a difference (or cannot tell) is the dump compared exactly
// (diffEntries), and the repairs written: writes first, then deletes
// (make-before-break: a service slot never points at a backend that is
// written after it). The mirror is not changed: it is what was written,
// the map is what drifted.
func (c *mapCheck[E, K]) result() messages.Drift {
	c.release()
	d := c.d
	if c.err != nil {
		d.Err = errors.Join(d.Err, c.err)
		return d
	}
	if c.reloaded {
		return d
	}
	n := c.n()
	var skip func(E) bool
	if len(c.written) > 0 {
		for k := range c.written {
			if c.holdsK(k) {
				n--
			}
		}
		skip = func(e E) bool { _, ok := c.written[c.keyOf(e)]; return ok }
	}
	if c.got.Holds(n, c.has, skip) {
		return d
	}
	got, want := c.got.Slice(), c.want()
	if skip != nil {
		got = slices.DeleteFunc(got, skip)
		want = slices.DeleteFunc(want, skip)
	}
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

func (p pairCheck) finish() []messages.Drift { return append(p.a.finish(), p.b.finish()...) }

// checkNow runs a whole drift check in the caller (the owner, or a test).
func checkNow(c driftCheck) []messages.Drift {
	c.read()
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
	c.want = o.collect
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
	// The cursor caches a frontend's slots: made in finish, after the
	// writes meanwhile.
	var cur *cursor
	at := func() *cursor {
		if cur == nil {
			cur = &cursor{o: o}
		}
		return cur
	}
	c.n = func() int { return o.n }
	c.has = func(e maps.ServiceEntry) bool { return at().holds(e) }
	c.holdsK = func(k maps.ServiceKey) bool { _, ok := at().get(k); return ok }
	c.want = o.collect
	c.keyOf = func(e maps.ServiceEntry) maps.ServiceKey { return e.Key }
	c.release = func() { o.check = nil }
	o.check = c
	return c
}

// reconcile is a whole drift check of the service mirror's map, in the
// caller.
func (o *svcMirror) reconcile() messages.Drift { return checkNow(o.beginCheck())[0] }
