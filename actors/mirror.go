package actors

import (
	"fmt"

	"github.com/actorlb/actorlb/maps"
)

// mirror is the pure core of a map owner: one map and an in-memory copy of
// its entries, so that writes of unchanged entries and deletes of absent
// keys never reach the kernel. Not safe for concurrent use: its actor owns it.
type mirror[E comparable, K comparable] struct {
	m       maps.Map[E, K]
	keyOf   func(E) K
	entries map[K]E
}

func newMirror[E comparable, K comparable](m maps.Map[E, K], keyOf func(E) K) *mirror[E, K] {
	return &mirror[E, K]{m: m, keyOf: keyOf, entries: map[K]E{}}
}

// load replaces the mirror with the map's contents.
func (o *mirror[E, K]) load() error {
	es, err := o.m.Dump()
	if err != nil {
		return err
	}
	o.entries = make(map[K]E, len(es))
	for _, e := range es {
		o.entries[o.keyOf(e)] = e
	}
	return nil
}

// apply writes the entries that differ, in order, then deletes the keys
// present, in order. After a failed write the mirror is reloaded from the
// map, which may hold a prefix of the writes.
func (o *mirror[E, K]) apply(writes []E, deletes []K) (written, deleted int, err error) {
	var ws []E
	for _, e := range writes {
		if cur, ok := o.entries[o.keyOf(e)]; !ok || cur != e {
			ws = append(ws, e)
		}
	}
	if len(ws) > 0 {
		if err := o.m.Update(ws); err != nil {
			if lerr := o.load(); lerr != nil {
				return 0, 0, fmt.Errorf("%w (and reloading the mirror failed: %v)", err, lerr)
			}
			return 0, 0, err
		}
		for _, e := range ws {
			o.entries[o.keyOf(e)] = e
		}
	}
	var ds []K
	for _, k := range deletes {
		if _, ok := o.entries[k]; ok {
			ds = append(ds, k)
		}
	}
	if len(ds) > 0 {
		if err := o.m.Delete(ds); err != nil {
			if lerr := o.load(); lerr != nil {
				return len(ws), 0, fmt.Errorf("%w (and reloading the mirror failed: %v)", err, lerr)
			}
			return len(ws), 0, err
		}
		for _, k := range ds {
			delete(o.entries, k)
		}
	}
	return len(ws), len(ds), nil
}

// dump returns a copy of the mirror's entries.
func (o *mirror[E, K]) dump() []E {
	out := make([]E, 0, len(o.entries))
	for _, e := range o.entries {
		out = append(out, e)
	}
	return out
}

func serviceKeyOf(e maps.ServiceEntry) maps.ServiceKey { return e.Key }
func backendKeyOf(e maps.BackendEntry) uint32          { return e.ID }
func revNATKeyOf(e maps.RevNATEntry) uint16            { return e.ID }
