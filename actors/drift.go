package actors

import (
	"errors"
	"fmt"

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

// reconcileMap checks m's pin (re-pinning it if it was removed or
// replaced) and makes m hold exactly what its owner wrote: n entries,
// those has accepts, listed by want. The map is first compared as it is
// read, against has, with nothing built (Map.Holds): the common case,
// where nothing drifted, costs the dump and a lookup an entry. Only when
// that finds a difference (or cannot tell) is the dump compared exactly
// (diffEntries, which builds an index of it), and the repairs written:
// writes first, then deletes (make-before-break: a service slot never
// points at a backend that is written after it). The mirror is not
// changed: it is what was written, the map is what drifted.
func reconcileMap[E, K comparable](m maps.Map[E, K], n int, has func(E) bool, want func() []E, key func(E) K) messages.Drift {
	d := messages.Drift{Map: m.Name()}
	d.Pin, d.Err = checkPin(m)
	got, same, err := m.Holds(n, has)
	if err != nil {
		d.Err = errors.Join(d.Err, err)
		return d
	}
	if same {
		return d
	}
	ws, ds, c := diffEntries(got.Slice(), want(), key)
	d.Missing, d.Changed, d.Extra = c.Missing, c.Changed, c.Extra
	if err := m.Update(ws); err != nil {
		d.Err = errors.Join(d.Err, err)
		return d
	}
	if err := m.Delete(ds); err != nil {
		d.Err = errors.Join(d.Err, err)
	}
	return d
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

// reconcile is reconcileMap for the mirror's map.
func (o *mirror[E, K, V]) reconcile() messages.Drift {
	o.index()
	return reconcileMap(o.m, o.entries.len(), o.holds, o.collect, func(e E) K { k, _ := o.split(e); return k })
}

// holds reports whether the mirror holds e, exactly as its owner would
// write it.
func (o *mirror[E, K, V]) holds(e E) bool {
	k, _ := o.split(e)
	v, ok := o.entries.get(k)
	return ok && o.join(k, v) == e
}

// reconcile is reconcileMap for the service mirror's map.
func (o *svcMirror) reconcile() messages.Drift {
	o.index()
	c := cursor{o: o}
	return reconcileMap(o.m, o.n, c.holds, o.collect, func(e maps.ServiceEntry) maps.ServiceKey { return e.Key })
}
