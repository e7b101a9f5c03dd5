package actors

import (
	"encoding/binary"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/pagedindex"
	"github.com/actorlb/actorlb/maps"
)

// svcMirror is the service map owner's mirror: like mirror, but indexed by
// frontend, each holding its slots in one slice (index = slot number). An
// upsert writes all the slots of one frontend, so this takes one map
// lookup per service instead of one per slot, and a fraction of the memory
// (no key per slot, no pointer in the key). Not safe for concurrent use.
//
// A frontend is kept in one of two forms, never both:
//
//   - compact (the table's own entries): its slots hold a backend ID and
//     the service ID, the same for every slot, and nothing else, so a
//     slot takes the 4 bytes of its backend ID (see words);
//   - whole: any other entries (a slot of backend ID 0, a flag, a count,
//     two revNAT indexes: what drift or another writer may leave), one
//     slotValue per slot.
//
// A frontend goes whole on the first entry the compact form cannot hold
// and stays whole until it has no entry left.
type svcMirror struct {
	m       maps.ServiceMap
	compact *pagedindex.Packed[addrkey.ServiceKey, []uint32] // packed frontends in pages by address (newCompactIndex); valid once indexed
	whole   packedmap.Map[addrkey.ServiceKey, []slotValue]   // the same
	indexed bool
	n       int                                           // slots held, once indexed
	loaded  maps.Entries[maps.ServiceEntry]               // the last load, until index
	check   *mapCheck[maps.ServiceEntry, maps.ServiceKey] // the drift check in flight (beginCheck), if any
	ws      []maps.ServiceEntry                           // scratch of apply
	ds      []maps.ServiceKey
	looked  []looked // scratch of apply: its first pass's lookups
	touched touched  // scratch of apply: the frontends its second pass has changed
}

// looked is a frontend apply's first pass looked up (the check of which
// writes differ, or of which deleted keys are held), with what the index
// held for it: the second pass (the writes, or the deletes, once the map
// took them) finds it there instead of probing the index again, unless
// it changed that frontend already (touched).
type looked struct {
	fe    addrkey.ServiceKey
	w     []uint32
	slots []slotValue
}

// touched is a set of frontends, by a hash of their keys: a frontend the
// set holds may be reported as touched when it is not (another frontend
// of its hash was), never the other way round.
type touched [touchedBits / 64]uint64

const (
	touchedLog  = 14
	touchedBits = 1 << touchedLog // 2 KiB: a request's thousand frontends fill some 6% of it
)

// touch adds k's frontend to the set, reporting whether it (or another
// of its hash) was there already.
func (t *touched) touch(k maps.ServiceKey) bool {
	a := k.Address.As16() // a zone, which the frontend ignores, is left out
	h := binary.LittleEndian.Uint64(a[:8])*0x9e3779b97f4a7c15 ^ binary.LittleEndian.Uint64(a[8:]) ^
		uint64(k.Port)<<32 ^ uint64(k.Proto)<<48 ^ uint64(k.Scope)<<56
	bit := (h * 0xff51afd7ed558ccd) >> (64 - touchedLog)
	was := t[bit/64]&(1<<(bit%64)) != 0
	t[bit/64] |= 1 << (bit % 64)
	return was
}

// slotValue is one slot of a whole frontend; ok is false for a hole.
type slotValue struct {
	v  maps.ServiceValue
	ok bool
}

// The words of a compact frontend: the master's value in the first three,
// then a word of flags and the slots' revNAT index, then the backend ID of
// slot i at words[header+i-1] (0: a hole). The slice ends at the highest
// slot held.
const (
	wMasterID    = 0 // master BackendID
	wMasterCount = 1 // master Count | RevNATIndex<<16
	wMasterFlags = 2 // master Flags | Flags2<<8 | QCount<<16
	wInfo        = 3 // hasMaster (bit 0) | slots' RevNATIndex<<16
	header       = 4
	hasMaster    = 1
)

// compactSlot reports whether v, at a slot other than the master, can be
// held by a compact frontend whose slots' revNAT index is rev (any, when
// the frontend holds no slot yet: anyRev).
func compactSlot(v maps.ServiceValue, rev uint16, anyRev bool) bool {
	return v.BackendID != 0 && v.Count == 0 && v.Flags == 0 && v.Flags2 == 0 && v.QCount == 0 &&
		(anyRev || v.RevNATIndex == rev)
}

// compactGet returns slot of a compact frontend's words w.
func compactGet(w []uint32, slot uint16) (maps.ServiceValue, bool) {
	if slot == 0 {
		if w[wInfo]&hasMaster == 0 {
			return maps.ServiceValue{}, false
		}
		return maps.ServiceValue{
			BackendID: w[wMasterID], Count: uint16(w[wMasterCount]), RevNATIndex: uint16(w[wMasterCount] >> 16),
			Flags: uint8(w[wMasterFlags]), Flags2: uint8(w[wMasterFlags] >> 8), QCount: uint16(w[wMasterFlags] >> 16),
		}, true
	}
	i := header + int(slot) - 1
	if i >= len(w) || w[i] == 0 {
		return maps.ServiceValue{}, false
	}
	rev, _ := slotsRev(w)
	return maps.ServiceValue{BackendID: w[i], RevNATIndex: rev}, true
}

// slotsRev returns the revNAT index of the slots of compact words w, and
// whether w holds no slot yet (then a slot of any revNAT index fits).
func slotsRev(w []uint32) (rev uint16, none bool) {
	return uint16(w[wInfo] >> 16), len(w) == header
}

// setMaster writes the master's value into w, reporting whether it was
// absent.
func setMaster(w []uint32, v maps.ServiceValue) (added bool) {
	added = w[wInfo]&hasMaster == 0
	w[wMasterID] = v.BackendID
	w[wMasterCount] = uint32(v.Count) | uint32(v.RevNATIndex)<<16
	w[wMasterFlags] = uint32(v.Flags) | uint32(v.Flags2)<<8 | uint32(v.QCount)<<16
	w[wInfo] |= hasMaster
	return added
}

// wholeOf returns the slots of compact words w, with room for size slots.
func wholeOf(w []uint32, size int) []slotValue {
	n := max(size, len(w)-header+1)
	slots := make([]slotValue, len(w)-header+1, n)
	for s := range slots {
		slots[s].v, slots[s].ok = compactGet(w, uint16(s))
	}
	return slots
}

func newSvcMirror(m maps.ServiceMap) *svcMirror { return &svcMirror{m: m, compact: newCompactIndex(0)} }

// newCompactIndex returns an empty index of compact frontends with room
// for n: the IPv4 ones by their run key (addrkey.ServiceKeyRun: the
// addresses a cluster hands its services in order are runs of keys, whose
// words share pages), the IPv6 ones packed in a map where the packer can.
func newCompactIndex(n int) *pagedindex.Packed[addrkey.ServiceKey, []uint32] {
	return pagedindex.NewPacked[addrkey.ServiceKey, []uint32](n,
		pagedindex.Runs[addrkey.ServiceKey]{Of: addrkey.ServiceKeyRun, Back: addrkey.ServiceKeyFromRun}, addrkey.NewServiceKeyPacker())
}

// load replaces the mirror with the map's contents (indexed by index).
func (o *svcMirror) load() error {
	es, err := o.m.DumpEntries()
	if err != nil {
		return err
	}
	o.loaded, o.indexed = es, false
	o.m.SetEntries(es.Len())
	o.check.reload()
	return nil
}

// The forms of a frontend while index reads a dump.
const (
	formNone    = iota // no slot yet (the master alone is compact)
	formCompact        // every slot so far fits the compact form
	formWhole
)

// index builds the index from the last load, if not done yet. A dump
// comes in the kernel's hash order, the slots of one frontend scattered
// over it: so the frontends are found first, with a small map (one entry
// per frontend, which stays in the cache, where the index's values do
// not) that also gives each frontend's highest slot and form; then every
// frontend's slots are allocated once at their size and filled, and the
// index gets one entry per frontend (no lookup per slot, no slice grown
// slot by slot).
func (o *svcMirror) index() {
	if o.indexed {
		return
	}
	fes := packedmap.New[addrkey.ServiceKey, int32](o.loaded.Len()/8+1, addrkey.NewServiceKeyPacker())
	var keys []addrkey.ServiceKey
	var size []int   // highest slot + 1, by frontend
	var form []uint8 // by frontend
	var rev []uint16 // the slots' revNAT index, by compact frontend
	at := make([]int32, o.loaded.Len())
	buf := make([]maps.ServiceEntry, min(maps.ChunkLen, o.loaded.Len())) // each pass decodes the entries a chunk at a time into it
	j := 0
	for chunk := range o.loaded.Chunks(buf) {
		for ci := range chunk {
			e := &chunk[ci]
			fe := addrkey.ServiceKeyOf(e.Key)
			i, ok := fes.Get(fe)
			if !ok {
				i = int32(len(keys))
				fes.Set(fe, i)
				keys, size, form, rev = append(keys, fe), append(size, 0), append(form, formNone), append(rev, 0)
			}
			at[j] = i
			j++
			size[i] = max(size[i], int(e.Key.Slot)+1)
			if e.Key.Slot == 0 || form[i] == formWhole {
				continue
			}
			// A repeated key (the last wins) may make a frontend whole that
			// its last values would have left compact: both forms hold the
			// same entries.
			switch {
			case !compactSlot(e.Value, rev[i], form[i] == formNone):
				form[i] = formWhole
			case form[i] == formNone:
				form[i], rev[i] = formCompact, e.Value.RevNATIndex
			}
		}
	}
	words := make([][]uint32, len(keys))
	slots := make([][]slotValue, len(keys))
	compact := 0
	for i, n := range size {
		if form[i] == formWhole {
			slots[i] = make([]slotValue, n)
			continue
		}
		words[i] = make([]uint32, header+max(n, 1)-1)
		words[i][wInfo] = uint32(rev[i]) << 16
		compact++
	}
	o.n, j = 0, 0
	for chunk := range o.loaded.Chunks(buf) {
		for ci := range chunk {
			e := &chunk[ci]
			i := at[j]
			j++
			if w := words[i]; w != nil {
				if e.Key.Slot == 0 {
					if setMaster(w, e.Value) {
						o.n++
					}
					continue
				}
				if k := header + int(e.Key.Slot) - 1; w[k] == 0 {
					o.n++
					w[k] = e.Value.BackendID
				} else {
					w[k] = e.Value.BackendID // a dump may repeat a key: the last wins
				}
				continue
			}
			s := &slots[i][e.Key.Slot]
			if !s.ok {
				o.n++
			}
			*s = slotValue{e.Value, true}
		}
	}
	o.compact = newCompactIndex(compact)
	o.whole = packedmap.New[addrkey.ServiceKey, []slotValue](len(keys)-compact, addrkey.NewServiceKeyPacker())
	for i, fe := range keys {
		if words[i] != nil {
			o.compact.Set(fe, words[i])
		} else {
			o.whole.Set(fe, slots[i])
		}
	}
	o.indexed, o.loaded = true, maps.Entries[maps.ServiceEntry]{}
	o.m.SetEntries(o.n) // a dump may repeat a key
}

// cursor caches the entries of the last frontend looked up: the entries
// of one request come frontend by frontend. At most one of w and slots is
// set: the frontend's words if it is compact, its slots if it is whole,
// neither if the mirror does not hold it.
type cursor struct {
	o     *svcMirror
	fe    addrkey.ServiceKey
	k     maps.ServiceKey // the last key looked up, of frontend fe
	w     []uint32
	slots []slotValue
	valid bool
	// A first pass's cursor (record) notes its lookups in its mirror's
	// looked; a second pass's takes them from replay in order, from next
	// on, for the frontends it has not touched.
	record bool
	replay []looked
	next   int
}

// sameFrontend reports whether keys a and b, whatever their slots, are
// of one frontend, comparing their fields as they are (cheaper than
// making each one's addrkey.ServiceKey): when it says yes, their
// ServiceKeys are equal. It may say no to keys whose ServiceKeys are
// equal (addresses that differ only by a zone), so a caller that gets no
// compares those.
func sameFrontend(a, b maps.ServiceKey) bool {
	return a.Address == b.Address && a.Port == b.Port && a.Proto == b.Proto && a.Scope == b.Scope
}

func (c *cursor) at(k maps.ServiceKey) {
	if c.valid && sameFrontend(k, c.k) {
		return
	}
	fe := addrkey.ServiceKeyOf(k)
	c.k = k
	if c.valid && c.fe == fe {
		return
	}
	c.fe, c.valid, c.w, c.slots = fe, true, nil, nil
	if c.replay != nil && c.replayed(k) {
		return
	}
	if w, ok := c.o.compact.Get(fe); ok {
		c.w = w
	} else if c.o.whole.Len() > 0 {
		c.slots, _ = c.o.whole.Get(fe)
	}
	if c.record {
		c.o.looked = append(c.o.looked, looked{fe: fe, w: c.w, slots: c.slots})
	}
}

// replayed sets the cursor's frontend (that of k) as the first pass
// looked it up, reporting whether it could: the frontend is next in
// replay (the second pass meets the frontends in the first pass's order,
// less those whose entries it dropped) and this pass has not touched it
// yet (a frontend may come back later in a request, after this pass
// changed it).
func (c *cursor) replayed(k maps.ServiceKey) bool {
	if c.o.touched.touch(k) {
		return false
	}
	for ; c.next < len(c.replay); c.next++ {
		if l := &c.replay[c.next]; l.fe == c.fe {
			c.w, c.slots = l.w, l.slots
			c.next++
			return true
		}
	}
	return false
}

func (c *cursor) get(k maps.ServiceKey) (maps.ServiceValue, bool) {
	c.at(k)
	if c.w != nil {
		return compactGet(c.w, k.Slot)
	}
	if int(k.Slot) < len(c.slots) && c.slots[k.Slot].ok {
		return c.slots[k.Slot].v, true
	}
	return maps.ServiceValue{}, false
}

// holds reports whether the mirror holds e: its key, with its value.
func (c *cursor) holds(e maps.ServiceEntry) bool {
	v, ok := c.get(e.Key)
	return ok && v == e.Value
}

// fits reports whether v at slot fits the cursor's frontend compact (a
// frontend the mirror does not hold yet included).
func (c *cursor) fits(slot uint16, v maps.ServiceValue) bool {
	if c.slots != nil {
		return false
	}
	if slot == 0 {
		return true
	}
	if c.w == nil {
		return compactSlot(v, 0, true)
	}
	rev, none := slotsRev(c.w)
	return compactSlot(v, rev, none)
}

func (c *cursor) set(k maps.ServiceKey, v maps.ServiceValue) {
	c.at(k)
	if !c.fits(k.Slot, v) {
		if c.slots == nil {
			c.toWhole(int(k.Slot) + 1)
		}
		c.setWhole(k.Slot, v)
		return
	}
	if c.w == nil {
		c.w = make([]uint32, header, header+max(int(k.Slot), 1)-1)
		c.o.compact.Set(c.fe, c.w)
	}
	if k.Slot == 0 {
		if setMaster(c.w, v) {
			c.o.n++
		}
		return
	}
	if len(c.w) == header {
		c.w[wInfo] = c.w[wInfo]&hasMaster | uint32(v.RevNATIndex)<<16
	}
	i := header + int(k.Slot) - 1
	if n := i + 1; n > len(c.w) {
		if n <= cap(c.w) {
			clear(c.w[len(c.w):n])
			c.w = c.w[:n]
		} else {
			c.w = append(c.w, make([]uint32, n-len(c.w))...)
		}
		c.o.compact.Set(c.fe, c.w)
	}
	if c.w[i] == 0 {
		c.o.n++
	}
	c.w[i] = v.BackendID
}

// toWhole makes the cursor's frontend whole (a frontend the mirror does
// not hold yet included), with room for size slots.
func (c *cursor) toWhole(size int) {
	if c.w == nil {
		c.slots = make([]slotValue, 0, size)
	} else {
		c.slots = wholeOf(c.w, size)
		c.o.compact.Delete(c.fe)
		c.w = nil
	}
	c.o.whole.Set(c.fe, c.slots)
}

// setWhole sets slot of the cursor's whole frontend.
func (c *cursor) setWhole(slot uint16, v maps.ServiceValue) {
	slots := c.slots
	if n := int(slot) + 1; n > len(slots) {
		if n <= cap(slots) {
			clear(slots[len(slots):n])
			slots = slots[:n]
		} else {
			slots = append(slots, make([]slotValue, n-len(slots))...)
		}
		c.o.whole.Set(c.fe, slots)
		c.slots = slots
	}
	if !slots[slot].ok {
		c.o.n++
	}
	slots[slot] = slotValue{v, true}
}

// reserve makes room, in one exact-size allocation, for the slots that
// run (entries starting with k's frontend) writes to that frontend, in
// the form they need: slices grown one slot at a time would keep up to
// twice the memory.
func (c *cursor) reserve(k maps.ServiceKey, run []maps.ServiceEntry) {
	c.at(k)
	n, fits := len(c.slots), c.slots == nil
	rev, anyRev := uint16(0), true
	if c.w != nil {
		n = len(c.w) - header + 1
		rev, anyRev = slotsRev(c.w)
	}
	noSlots := anyRev // a compact frontend without slots, or none
	for _, e := range run {
		if !sameFrontend(e.Key, k) && addrkey.ServiceKeyOf(e.Key) != c.fe {
			break
		}
		n = max(n, int(e.Key.Slot)+1)
		if !fits || e.Key.Slot == 0 {
			continue
		}
		switch {
		case !compactSlot(e.Value, rev, anyRev):
			fits = false
		case anyRev:
			rev, anyRev = e.Value.RevNATIndex, false
		}
	}
	switch {
	case fits && c.w == nil:
		// At the length the run leaves it, with the slots' revNAT index
		// (the slots it skips are holes): set then writes the words
		// without setting the index entry again.
		c.w = make([]uint32, header+max(n, 1)-1)
		c.w[wInfo] = uint32(rev) << 16
		c.o.compact.Set(c.fe, c.w)
	case fits:
		need := header + n - 1
		switch {
		case need > cap(c.w):
			grown := make([]uint32, need)
			copy(grown, c.w)
			c.w = grown
		case need > len(c.w):
			w := c.w[:need]
			clear(w[len(c.w):]) // zero already (a trim drops only holes), as set keeps it
			c.w = w
		default:
			return
		}
		if noSlots && !anyRev {
			c.w[wInfo] = c.w[wInfo]&hasMaster | uint32(rev)<<16
		}
		c.o.compact.Set(c.fe, c.w)
	case c.slots == nil:
		c.toWhole(n)
	case n > cap(c.slots):
		grown := make([]slotValue, len(c.slots), n)
		copy(grown, c.slots)
		c.o.whole.Set(c.fe, grown)
		c.slots = grown
	}
}

// del removes slot k; a frontend without entries leaves the index.
func (c *cursor) del(k maps.ServiceKey) {
	c.at(k)
	if c.w != nil {
		c.delCompact(k.Slot)
		return
	}
	slots := c.slots
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
		c.o.whole.Delete(c.fe)
		c.slots = nil
	case n < len(slots):
		slots = slots[:n]
		c.o.whole.Set(c.fe, slots)
		c.slots = slots
	}
}

func (c *cursor) delCompact(slot uint16) {
	w := c.w
	if slot == 0 {
		if w[wInfo]&hasMaster == 0 {
			return
		}
		w[wMasterID], w[wMasterCount], w[wMasterFlags] = 0, 0, 0
		w[wInfo] &^= hasMaster
	} else {
		i := header + int(slot) - 1
		if i >= len(w) || w[i] == 0 {
			return
		}
		w[i] = 0
	}
	c.o.n--
	n := len(w)
	for n > header && w[n-1] == 0 {
		n--
	}
	switch {
	case n == header && w[wInfo]&hasMaster == 0:
		c.o.compact.Delete(c.fe)
		c.w = nil
	case n < len(w):
		c.w = w[:n]
		c.o.compact.Set(c.fe, c.w)
	}
}

// apply is mirror.apply: writes that differ, in order, then deletes of
// present keys, in order; after a failure the mirror is reloaded. Either
// way the map's entry count is the mirror's when it returns.
func (o *svcMirror) apply(writes []maps.ServiceEntry, deletes []maps.ServiceKey) (written, deleted int, err error) {
	o.index()
	o.looked = o.looked[:0]
	c := cursor{o: o, record: true}
	ws, copied := changedOnly(writes, o.ws, func(e maps.ServiceEntry) bool { return !c.holds(e) })
	ds := o.ds[:0]
	defer func() {
		o.ws, o.ds = scratch(o.ws, ws, copied, ds)
		clear(o.looked) // no slices kept alive
		o.looked = o.looked[:0]
		if o.indexed { // not after a reload: load has set the count
			o.m.SetEntries(o.n)
		}
	}()
	if len(ws) > 0 {
		if err := o.m.Update(ws); err != nil {
			return 0, 0, reloadAfter(err, o.load)
		}
		if o.compact.Len() == 0 && o.whole.Len() == 0 && len(ws) >= reserveMin {
			o.compact.Reserve(frontends(ws), 0) // sized at once, not grown by doubling
		}
		clear(o.touched[:])
		c = cursor{o: o, replay: o.looked}
		for i, e := range ws {
			if !c.valid || !sameFrontend(e.Key, c.k) {
				c.reserve(e.Key, ws[i:]) // the first write of a frontend's run (or a key of it with another zone)
			}
			if o.check.writing() {
				old, had := c.get(e.Key)
				o.check.wrote(e.Key, maps.ServiceEntry{Key: e.Key, Value: old}, had)
			}
			c.set(e.Key, e.Value)
		}
	}
	clear(o.looked)
	o.looked = o.looked[:0]
	c = cursor{o: o, record: true}
	for _, k := range deletes {
		if _, ok := c.get(k); ok {
			ds = append(ds, k)
		}
	}
	if len(ds) > 0 {
		if err := o.m.Delete(ds); err != nil {
			return len(ws), 0, reloadAfter(err, o.load)
		}
		clear(o.touched[:])
		c = cursor{o: o, replay: o.looked}
		for _, k := range ds {
			if o.check.writing() {
				old, _ := c.get(k) // ds holds only keys the mirror has
				o.check.wrote(k, maps.ServiceEntry{Key: k, Value: old}, true)
			}
			c.del(k)
		}
	}
	return len(ws), len(ds), nil
}

// dump returns the mirror's entries: before index, the loaded dump itself
// (nothing writes to it), else a copy (collect).
func (o *svcMirror) dump() maps.Entries[maps.ServiceEntry] {
	if !o.indexed {
		return o.loaded
	}
	return maps.EntriesOf(o.collect())
}

// collect returns a copy of the indexed mirror's entries.
func (o *svcMirror) collect() []maps.ServiceEntry {
	out := make([]maps.ServiceEntry, 0, o.n)
	for fe, w := range o.compact.All {
		for s := range len(w) - header + 1 {
			if v, ok := compactGet(w, uint16(s)); ok {
				out = append(out, maps.ServiceEntry{Key: fe.Key(uint16(s)), Value: v})
			}
		}
	}
	for fe, slots := range o.whole.All {
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
