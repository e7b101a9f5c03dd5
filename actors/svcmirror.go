package actors

import (
	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/maps"
)

// svcMirror is the service map owner's mirror: like mirror, but indexed by
// frontend, each holding its slots in a slice (index = slot number). An
// upsert writes all the slots of one frontend, so this takes one map
// lookup per service instead of one per slot, and a fraction of the memory
// (no key per slot, no pointer in the key). Not safe for concurrent use.
type svcMirror struct {
	m       maps.ServiceMap
	entries packedmap.Map[addrkey.ServiceKey, []slotValue] // IPv4 frontends packed; valid once indexed
	indexed bool
	n       int                 // slots held, once indexed
	loaded  []maps.ServiceEntry // the last load, until index
	ws      []maps.ServiceEntry // scratch of apply
	ds      []maps.ServiceKey
}

// slotValue is one slot of a frontend; ok is false for a hole.
type slotValue struct {
	v  maps.ServiceValue
	ok bool
}

func newSvcMirror(m maps.ServiceMap) *svcMirror { return &svcMirror{m: m} }

// load replaces the mirror with the map's contents (indexed by index).
func (o *svcMirror) load() error {
	es, err := o.m.Dump()
	if err != nil {
		return err
	}
	o.loaded, o.indexed = es, false
	o.m.SetEntries(len(es))
	return nil
}

// index builds the index from the last load, if not done yet. A dump
// comes in the kernel's hash order, the slots of one frontend scattered
// over it: so the frontends are found first, with a small map (one entry
// per frontend, which stays in the cache, where the index's values do
// not) that also gives each frontend's highest slot; then every frontend's
// slots are allocated once at their size and filled, and the index gets
// one entry per frontend (no lookup per slot, no slice grown slot by slot).
func (o *svcMirror) index() {
	if o.indexed {
		return
	}
	fes := packedmap.New[addrkey.ServiceKey, int32](len(o.loaded)/8+1, addrkey.NewServiceKeyPacker())
	var keys []addrkey.ServiceKey
	var size []int // highest slot + 1, by frontend
	at := make([]int32, len(o.loaded))
	for j, e := range o.loaded {
		fe := addrkey.ServiceKeyOf(e.Key)
		i, ok := fes.Get(fe)
		if !ok {
			i = int32(len(keys))
			fes.Set(fe, i)
			keys, size = append(keys, fe), append(size, 0)
		}
		at[j] = i
		size[i] = max(size[i], int(e.Key.Slot)+1)
	}
	slots := make([][]slotValue, len(keys))
	for i, n := range size {
		slots[i] = make([]slotValue, n)
	}
	o.n = 0
	for j, e := range o.loaded {
		s := &slots[at[j]][e.Key.Slot]
		if !s.ok {
			o.n++
		}
		*s = slotValue{e.Value, true} // a dump may repeat a key: the last wins
	}
	o.entries = packedmap.New[addrkey.ServiceKey, []slotValue](len(keys), addrkey.NewServiceKeyPacker())
	for i, fe := range keys {
		o.entries.Set(fe, slots[i])
	}
	o.indexed, o.loaded = true, nil
	o.m.SetEntries(o.n) // a dump may repeat a key
}

// cursor caches the slots of the last frontend looked up: the entries of
// one request come frontend by frontend.
type cursor struct {
	o     *svcMirror
	fe    addrkey.ServiceKey
	slots []slotValue
	valid bool
}

func (c *cursor) at(k maps.ServiceKey) []slotValue {
	fe := addrkey.ServiceKeyOf(k)
	if !c.valid || c.fe != fe {
		slots, _ := c.o.entries.Get(fe)
		c.fe, c.slots, c.valid = fe, slots, true
	}
	return c.slots
}

func (c *cursor) get(k maps.ServiceKey) (maps.ServiceValue, bool) {
	slots := c.at(k)
	if int(k.Slot) < len(slots) && slots[k.Slot].ok {
		return slots[k.Slot].v, true
	}
	return maps.ServiceValue{}, false
}

func (c *cursor) set(k maps.ServiceKey, v maps.ServiceValue) {
	slots := c.at(k)
	if n := int(k.Slot) + 1; n > len(slots) {
		if n <= cap(slots) {
			clear(slots[len(slots):n])
			slots = slots[:n]
		} else {
			slots = append(slots, make([]slotValue, n-len(slots))...)
		}
		c.o.entries.Set(c.fe, slots)
		c.slots = slots
	}
	if !slots[k.Slot].ok {
		c.o.n++
	}
	slots[k.Slot] = slotValue{v, true}
}

// reserve makes room, in one exact-size allocation, for the slots that
// run (entries starting with k's frontend) writes to that frontend: slices
// grown one slot at a time would keep up to twice the memory.
func (c *cursor) reserve(k maps.ServiceKey, run []maps.ServiceEntry) {
	slots := c.at(k)
	n := len(slots)
	for _, e := range run {
		if addrkey.ServiceKeyOf(e.Key) != c.fe {
			break
		}
		n = max(n, int(e.Key.Slot)+1)
	}
	if n > cap(slots) {
		grown := make([]slotValue, len(slots), n)
		copy(grown, slots)
		c.o.entries.Set(c.fe, grown)
		c.slots = grown
	}
}

// del removes slot k; a frontend without slots leaves the index.
func (c *cursor) del(k maps.ServiceKey) {
	slots := c.at(k)
	if int(k.Slot) >= len(slots) || !slots[k.Slot].ok {
		return
	}
	c.o.n--
	slots[k.Slot] = slotValue{}
	n := len(slots)
	for n > 0 && !slots[n-1].ok {
		n--
	}
	switch {
	case n == 0:
		c.o.entries.Delete(c.fe)
		c.slots = nil
	case n < len(slots):
		slots = slots[:n]
		c.o.entries.Set(c.fe, slots)
		c.slots = slots
	}
}

// apply is mirror.apply: writes that differ, in order, then deletes of
// present keys, in order; after a failure the mirror is reloaded. Either
// way the map's entry count is the mirror's when it returns.
func (o *svcMirror) apply(writes []maps.ServiceEntry, deletes []maps.ServiceKey) (written, deleted int, err error) {
	o.index()
	c := cursor{o: o}
	ws, copied := changedOnly(writes, o.ws, func(e maps.ServiceEntry) bool {
		cur, ok := c.get(e.Key)
		return !ok || cur != e.Value
	})
	ds := o.ds[:0]
	defer func() {
		o.ws, o.ds = scratch(o.ws, ws, copied, ds)
		if o.indexed { // not after a reload: load has set the count
			o.m.SetEntries(o.n)
		}
	}()
	if len(ws) > 0 {
		if err := o.m.Update(ws); err != nil {
			return 0, 0, reloadAfter(err, o.load)
		}
		if o.entries.Len() == 0 && len(ws) >= reserveMin {
			o.entries.Reserve(frontends(ws)) // sized at once, not grown by doubling
		}
		c = cursor{o: o}
		for i, e := range ws {
			if fe := addrkey.ServiceKeyOf(e.Key); !c.valid || fe != c.fe {
				c.reserve(e.Key, ws[i:]) // the first write of a frontend's run
			}
			c.set(e.Key, e.Value)
		}
	}
	c = cursor{o: o}
	for _, k := range deletes {
		if _, ok := c.get(k); ok {
			ds = append(ds, k)
		}
	}
	if len(ds) > 0 {
		if err := o.m.Delete(ds); err != nil {
			return len(ws), 0, reloadAfter(err, o.load)
		}
		c = cursor{o: o}
		for _, k := range ds {
			c.del(k)
		}
	}
	return len(ws), len(ds), nil
}

// dump returns the mirror's entries (before index, the loaded dump
// itself: neither side writes to it).
func (o *svcMirror) dump() []maps.ServiceEntry {
	if !o.indexed {
		return o.loaded
	}
	n := 0
	for _, slots := range o.entries.All {
		n += len(slots)
	}
	out := make([]maps.ServiceEntry, 0, n)
	for fe, slots := range o.entries.All {
		for i, s := range slots {
			if s.ok {
				out = append(out, maps.ServiceEntry{Key: fe.Key(uint16(i)), Value: s.v})
			}
		}
	}
	return out
}

// frontends counts the frontends of ws, whose entries come frontend by
// frontend.
func frontends(ws []maps.ServiceEntry) int {
	n := 0
	var last addrkey.ServiceKey
	for i, e := range ws {
		if fe := addrkey.ServiceKeyOf(e.Key); i == 0 || fe != last {
			n, last = n+1, fe
		}
	}
	return n
}
