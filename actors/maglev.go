package actors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/actorlb/actorlb/internal/maglev"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/cespare/xxhash/v2"
	"github.com/sirupsen/logrus"
)

// maglevOwner is the pure core of the Maglev maps' owner: both maps, and
// per service only what it needs to skip work, not the tables (M entries,
// 64 KB at the default size): the digest of the inputs it last wrote (or
// found) the table from, and the digest of the table itself. It builds
// tables with one Builder and three scratch tables of M entries, shared by
// every service. Not safe for concurrent use: its actor owns it.
type maglevOwner struct {
	fams [2]maglevFamily
	log  *logrus.Entry
	b    maglev.Builder
	// scratch tables of M entries: built, read from the map, and written.
	built, read []lb.BackendID
	raw         []uint32
	// req is the index of the MaglevApply being applied among those of
	// one flush (applyAll), -1 outside; failed is, by that index, the
	// staged tables a map flush did not add.
	req    int
	failed map[int]failedWrites
	// pre holds the tables built ahead, on two goroutines, for the writes
	// of the chunk of an apply being written (prebuild); pb is the second
	// goroutine's builder (the first uses b).
	pre prebuilt
	pb  maglev.Builder
}

// prebuildChunk is the most writes whose tables are built ahead at once:
// the buffers hold that many tables (64 KB each at the default M).
const prebuildChunk = 16

// prebuilt is the tables built ahead for a chunk of writes, by index in
// the chunk: ok[j] when tabs[j] (or errs[j]) is write j's; at is the
// index of the write being put.
type prebuilt struct {
	tabs [][]lb.BackendID
	errs []error
	ok   []bool
	at   int
}

// maglevFlushEvery is the most new tables staged before the owner
// flushes them (each holds a file descriptor until then).
const maglevFlushEvery = 256

type maglevFamily struct {
	m      maps.MaglevMap
	tables map[lb.ServiceID]maglevState
	staged []stagedWrite // new tables staged in m, not yet flushed
}

// stagedWrite is a new table staged by the request of index req (-1:
// reconcile).
type stagedWrite struct {
	id  lb.ServiceID
	req int
}

// failedWrites is what a request lost to a failed flush: n tables, and
// the flush's error.
type failedWrites struct {
	n   int
	err error
}

// maglevState is what the owner keeps per table (16 bytes).
type maglevState struct {
	in  uint64 // digest of the inputs the table was written from; 0: unknown (loaded, not yet checked)
	sum uint64 // digest of the table's entries (when in is known)
}

func newMaglevOwner(m4, m6 maps.MaglevMap, log *logrus.Entry) *maglevOwner {
	o := &maglevOwner{log: log, req: -1}
	o.fams[0].m, o.fams[1].m = m4, m6
	return o
}

func (o *maglevOwner) fam(f maps.Family) *maglevFamily {
	if f == maps.IPv6 {
		return &o.fams[1]
	}
	return &o.fams[0]
}

// load lists the tables the maps hold; their content is unknown until a
// write or a Sync checks it.
func (o *maglevOwner) load() error {
	for i := range o.fams {
		f := &o.fams[i]
		// Tables an earlier incarnation staged and did not flush (it
		// failed in between) join the map first, as writes done before
		// the crash: the map is the one place they are known.
		if _, err := f.m.Flush(); err != nil && o.log != nil {
			o.log.WithError(err).Warn("maglev: tables staged before a restart not added (the restore or a resent request writes them again)")
		}
		ids, err := f.m.IDs()
		if err != nil {
			return err
		}
		f.tables = make(map[lb.ServiceID]maglevState, len(ids))
		for _, id := range ids {
			f.tables[lb.ServiceID(id)] = maglevState{}
		}
		f.m.SetEntries(len(f.tables))
	}
	return nil
}

// inputDigest is the digest of what a table is built from: its size and
// its backends (address, port, protocol, ID, weight) in the order given
// (the core gives them in slot order, the same for the same set). Never 0.
func inputDigest(m uint32, bs []maglev.Backend) uint64 {
	var buf [16 + 2 + 1 + 4 + 2]byte
	d := xxhash.New()
	binary.LittleEndian.PutUint32(buf[:4], m)
	_, _ = d.Write(buf[:4])
	for _, b := range bs {
		a := b.Addr.Addr.Unmap().As16()
		copy(buf[:16], a[:])
		binary.BigEndian.PutUint16(buf[16:18], b.Addr.Port)
		buf[18] = byte(b.Addr.Protocol)
		binary.LittleEndian.PutUint32(buf[19:23], uint32(b.ID))
		binary.LittleEndian.PutUint16(buf[23:25], b.Weight)
		_, _ = d.Write(buf[:])
	}
	return max(d.Sum64(), 1)
}

// tableDigest is the digest of a table's entries.
func tableDigest(t []lb.BackendID) uint64 {
	if len(t) == 0 {
		return xxhash.Sum64(nil)
	}
	return xxhash.Sum64(unsafe.Slice((*byte)(unsafe.Pointer(&t[0])), 4*len(t)))
}

// build builds the table of bs into o.built.
func (o *maglevOwner) build(m uint32, bs []maglev.Backend) error {
	t, err := o.b.Build(m, maglev.Seed, bs, o.built)
	if err != nil {
		return err
	}
	o.built = t
	return nil
}

// buildOrTake makes o.built the table of bs: the one built ahead for the
// write being put, if any, else built now.
func (o *maglevOwner) buildOrTake(m uint32, bs []maglev.Backend) error {
	p := &o.pre
	if p.at < len(p.ok) && p.ok[p.at] {
		p.ok[p.at] = false
		if err := p.errs[p.at]; err != nil {
			return err
		}
		o.built, p.tabs[p.at] = p.tabs[p.at], o.built // the buffers are swapped, not copied
		return nil
	}
	return o.build(m, bs)
}

// prebuild builds ahead, on two goroutines, the tables of the writes that
// put will build (those whose inputs differ from what the owner wrote, or
// all with check), when there are two or more: building is most of a
// new maglev service's cost (about 0.4 ms at the default M), and the
// owner's flush would otherwise build one table after the other on one
// core. The tables are the ones put would build (same inputs, same M);
// a write put then skips wastes its build, and one prebuild skipped is
// built by put.
func (o *maglevOwner) prebuild(ws []messages.MaglevTable, check bool) {
	p := &o.pre
	for len(p.tabs) < len(ws) {
		p.tabs, p.errs, p.ok = append(p.tabs, nil), append(p.errs, nil), append(p.ok, false)
	}
	clear(p.ok)
	var todo []int
	for j, t := range ws {
		f := o.fam(t.Family)
		st, had := f.tables[t.ID]
		if had && st.in == inputDigest(f.m.TableSize(), t.Backends) && !check {
			continue
		}
		todo = append(todo, j)
	}
	if len(todo) < 2 {
		return
	}
	var wg sync.WaitGroup
	for g, b := range []*maglev.Builder{&o.b, &o.pb} {
		wg.Go(func() {
			for k := g; k < len(todo); k += 2 {
				j := todo[k]
				t := ws[j]
				p.tabs[j], p.errs[j] = b.Build(o.fam(t.Family).m.TableSize(), maglev.Seed, t.Backends, p.tabs[j])
			}
		})
	}
	wg.Wait()
	for _, j := range todo {
		p.ok[j] = true
	}
}

// readTable reads id's table into o.read and reports whether it has one.
func (o *maglevOwner) readTable(f *maglevFamily, id lb.ServiceID) (bool, error) {
	m := int(f.m.TableSize())
	o.raw = growU32(o.raw, m)
	ok, err := f.m.Read(uint16(id), o.raw)
	if err != nil || !ok {
		return false, err
	}
	if cap(o.read) < m {
		o.read = make([]lb.BackendID, m)
	}
	o.read = o.read[:m]
	for i, v := range o.raw {
		o.read[i] = lb.BackendID(v)
	}
	return true, nil
}

// writeBuilt writes o.built as id's table: staged, when it is new to the
// map, for the next flush (flushAll).
func (o *maglevOwner) writeBuilt(f *maglevFamily, id lb.ServiceID) error {
	o.raw = growU32(o.raw, len(o.built))
	for i, v := range o.built {
		o.raw[i] = uint32(v)
	}
	before := f.m.Staged()
	if err := f.m.Stage(uint16(id), o.raw); err != nil {
		return err
	}
	if f.m.Staged() > before {
		f.staged = append(f.staged, stagedWrite{id: id, req: o.req})
	}
	return nil
}

// flushIfMany flushes once maglevFlushEvery new tables are staged. It is
// called between writes, once each has recorded its state.
func (o *maglevOwner) flushIfMany() {
	if len(o.fams[0].staged)+len(o.fams[1].staged) >= maglevFlushEvery {
		o.flushAll()
	}
}

// flushAll adds the staged tables of both maps to them, in one batch
// each. A table the kernel did not add is gone: its state becomes
// unknown (as after a failed write), and its request is told in failed.
func (o *maglevOwner) flushAll() {
	for i := range o.fams {
		f := &o.fams[i]
		staged := f.staged
		f.staged = nil
		notWritten, err := f.m.Flush()
		if err == nil {
			continue
		}
		lost := make(map[lb.ServiceID]bool, len(notWritten))
		for _, id := range notWritten {
			lost[lb.ServiceID(id)] = true
			f.tables[lb.ServiceID(id)] = maglevState{} // as after a failed write
		}
		for _, w := range staged {
			if !lost[w.id] {
				continue
			}
			if o.failed == nil {
				o.failed = map[int]failedWrites{}
			}
			fw := o.failed[w.req]
			fw.n++
			if fw.err == nil {
				fw.err = err
			}
			o.failed[w.req] = fw
		}
		f.m.SetEntries(len(f.tables))
	}
}

// applyAll applies reqs in order, each on its own (a failed one does not
// stop the others), and adds the tables they staged to the maps at the
// end: one batch per map, one RCU grace period, for all of them. A
// request whose table a flush lost fails with the flush's error.
func (o *maglevOwner) applyAll(reqs []*messages.MaglevApply) []*messages.MaglevApplied {
	out := make([]*messages.MaglevApplied, len(reqs))
	for i, r := range reqs {
		o.req = i
		out[i] = o.apply(r)
	}
	o.req = -1
	o.dropPrebuilt()
	o.flushAll()
	for i, fw := range o.failed {
		if i < 0 || i >= len(out) {
			continue
		}
		out[i].Written -= fw.n
		if out[i].Err == nil {
			out[i].Err = fw.err
		}
	}
	o.failed = nil
	return out
}

func growU32(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}

// put makes id's table the one built from t's backends, unless the map
// holds it already: known from the inputs' digest (nothing read), or found
// by reading the map's table and comparing (maglev.Changed). It reports
// whether it wrote. check forces the comparison with the map (restore).
func (o *maglevOwner) put(t messages.MaglevTable, check bool) (wrote bool, err error) {
	f := o.fam(t.Family)
	m := f.m.TableSize()
	in := inputDigest(m, t.Backends)
	st, had := f.tables[t.ID]
	if had && st.in == in && !check {
		return false, nil
	}
	if err := o.buildOrTake(m, t.Backends); err != nil {
		return false, fmt.Errorf("maglev table of service %d: %w", t.ID, err)
	}
	sum := tableDigest(o.built)
	if had && st.in != 0 && !check {
		if st.sum == sum {
			// The same table from other inputs (a backend of weight 0
			// came or went): nothing to write.
			f.tables[t.ID] = maglevState{in: in, sum: sum}
			return false, nil
		}
	} else {
		// What the map holds is not known: read it and write only if
		// some entry differs.
		found, err := o.readTable(f, t.ID)
		if err != nil {
			return false, err
		}
		if found {
			changed := maglev.Changed(o.read, o.built)
			if len(changed) == 0 {
				f.tables[t.ID] = maglevState{in: in, sum: sum}
				f.m.SetEntries(len(f.tables))
				return false, nil
			}
			if o.log != nil {
				o.log.WithFields(logrus.Fields{"map": f.m.Name(), "serviceID": t.ID, "changed": len(changed), "entries": m}).Debug("maglev table differs from its backends': rewritten")
			}
		}
	}
	if err := o.writeBuilt(f, t.ID); err != nil {
		// The map may hold either table now: unknown until checked.
		f.tables[t.ID] = maglevState{}
		f.m.SetEntries(len(f.tables))
		return false, err
	}
	f.tables[t.ID] = maglevState{in: in, sum: sum}
	f.m.SetEntries(len(f.tables))
	return true, nil
}

// remove deletes the tables of ids the owner knows of (all of ids with
// force).
func (o *maglevOwner) remove(f *maglevFamily, ids []lb.ServiceID, force bool) (int, error) {
	var del []uint16
	for _, id := range ids {
		if _, ok := f.tables[id]; ok || force {
			del = append(del, uint16(id))
		}
	}
	if len(del) == 0 {
		return 0, nil
	}
	err := f.m.Delete(del)
	if err == nil {
		for _, id := range del {
			delete(f.tables, lb.ServiceID(id))
		}
	}
	f.m.SetEntries(len(f.tables))
	return len(del), err
}

// apply handles one MaglevApply: writes, then deletes; with Sync, the
// maps are listed again and every table that is not in Writes is deleted
// after the writes.
func (o *maglevOwner) apply(r *messages.MaglevApply) *messages.MaglevApplied {
	rep := &messages.MaglevApplied{ReqID: r.ReqID}
	if r.Sync {
		if rep.Err = o.load(); rep.Err != nil {
			return rep
		}
	}
	for start := 0; start < len(r.Writes); start += prebuildChunk {
		chunk := r.Writes[start:min(start+prebuildChunk, len(r.Writes))]
		o.prebuild(chunk, r.Sync)
		for j, t := range chunk {
			o.pre.at = j
			wrote, err := o.put(t, r.Sync)
			if err != nil {
				rep.Err = err
				return rep
			}
			if wrote {
				rep.Written++
				if r.Sync {
					rep.Repairs++
				}
			}
			o.flushIfMany()
		}
	}
	dels := [2][]lb.ServiceID{r.Deletes4, r.Deletes6}
	if r.Sync {
		want := [2]map[lb.ServiceID]bool{{}, {}}
		for _, t := range r.Writes {
			want[famIndexOf(t.Family)][t.ID] = true
		}
		for i := range o.fams {
			for id := range o.fams[i].tables {
				if !want[i][id] {
					dels[i] = append(dels[i], id)
					rep.Repairs++
				}
			}
		}
	}
	for i := range o.fams {
		n, err := o.remove(&o.fams[i], dels[i], false)
		rep.Deleted += n
		if err != nil {
			rep.Err = err
			return rep
		}
	}
	return rep
}

// dropPrebuilt lets the buffers of the tables built ahead go at the end
// of a flush (kept, they would hold up to prebuildChunk tables for good;
// a flush of single writes builds none ahead).
func (o *maglevOwner) dropPrebuilt() {
	o.pre = prebuilt{}
}

func famIndexOf(f maps.Family) int {
	if f == maps.IPv6 {
		return 1
	}
	return 0
}

// reconcile checks each map's pin (re-pinning it) and its tables against
// what the owner wrote: a table missing or whose entries changed is
// written again, a table the owner never wrote is deleted. A table is
// rebuilt only from the core's inputs (tables) when they are the ones it
// was written from: other inputs mean an operation on the service is in
// flight, which writes it anyway. A table whose content is unknown (loaded,
// not yet written by this incarnation) is checked against the core's
// inputs and only recorded when equal.
func (o *maglevOwner) reconcile(tables []messages.MaglevTable) []messages.Drift {
	inputs := [2]map[lb.ServiceID][]maglev.Backend{{}, {}}
	for _, t := range tables {
		inputs[famIndexOf(t.Family)][t.ID] = t.Backends
	}
	out := make([]messages.Drift, 0, 2)
	for i := range o.fams {
		out = append(out, o.reconcileFamily(&o.fams[i], inputs[i]))
	}
	return out
}

func (o *maglevOwner) reconcileFamily(f *maglevFamily, inputs map[lb.ServiceID][]maglev.Backend) (d messages.Drift) {
	d = messages.Drift{Map: f.m.Name()}
	defer func() {
		// The tables it wrote new join the maps in one batch.
		o.flushAll()
		if fw, ok := o.failed[-1]; ok {
			delete(o.failed, -1)
			if d.Err == nil {
				d.Err = fw.err
			}
		}
	}()
	d.Pin, d.Err = checkPin(f.m)
	ids, err := f.m.IDs()
	if err != nil {
		d.Err = errors.Join(d.Err, err)
		return d
	}
	held := make(map[lb.ServiceID]bool, len(ids))
	var extra []lb.ServiceID
	for _, id := range ids {
		held[lb.ServiceID(id)] = true
		if _, ok := f.tables[lb.ServiceID(id)]; !ok {
			extra = append(extra, lb.ServiceID(id))
		}
	}
	m := f.m.TableSize()
	for id, s := range f.tables {
		bs, ok := inputs[id]
		if !ok || (s.in != 0 && inputDigest(m, bs) != s.in) {
			continue // in flight: not the core's yet, or not ours any more
		}
		missing := !held[id]
		if !missing {
			found, err := o.readTable(f, id)
			if err != nil {
				d.Err = errors.Join(d.Err, err)
				return d
			}
			if found && s.in != 0 && tableDigest(o.read) == s.sum {
				continue
			}
			missing = !found
		}
		if err := o.build(m, bs); err != nil {
			d.Err = errors.Join(d.Err, fmt.Errorf("maglev table of service %d: %w", id, err))
			return d
		}
		if s.in == 0 {
			// Unknown content: record it if it is the core's table,
			// else leave it (it may be an operation's, in flight).
			if !missing && len(maglev.Changed(o.read, o.built)) == 0 {
				f.tables[id] = maglevState{in: inputDigest(m, bs), sum: tableDigest(o.built)}
			}
			continue
		}
		if err := o.writeBuilt(f, id); err != nil {
			d.Err = errors.Join(d.Err, err)
			return d
		}
		if missing {
			d.Missing++
		} else {
			d.Changed++
		}
		o.flushIfMany()
	}
	if len(extra) > 0 {
		n, err := o.remove(f, extra, true)
		d.Extra += n
		if err != nil {
			d.Err = errors.Join(d.Err, err)
		}
	}
	f.m.SetEntries(len(f.tables))
	return d
}

// maglevActor owns lb4_maglev and lb6_maglev: it builds each service's
// table from the inputs the core sends (off the supervisor's path) and
// writes the tables that changed. Like the other owners it handles what
// its mailbox holds in one flush and answers each sender in one message.
type maglevActor struct {
	owner *maglevOwner
	batch batcher[*messages.MaglevApply]
}

func newMaglevActor(m4, m6 maps.MaglevMap) actor.Producer {
	return func() actor.Actor {
		return &maglevActor{owner: newMaglevOwner(m4, m6, logrus.WithField("actor", "maglev"))}
	}
}

func (a *maglevActor) Receive(ctx actor.Context) {
	messages.EachRequest(ctx.Message(), func(m any) { a.receive(ctx, m) })
}

func (a *maglevActor) receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *actor.Started:
		if err := a.owner.load(); err != nil {
			panic(fmt.Errorf("maglev: load: %w", err))
		}
	case *messages.MaglevApply:
		a.batch.add(ctx, m)
	case *flushMsg:
		a.batch.flushing = false
		a.flush(ctx)
	case *messages.MaglevReconcile:
		a.flush(ctx)
		ctx.Respond(&messages.MapReconciled{ReqID: m.ReqID, Maps: a.owner.reconcile(m.Tables)})
	}
}

// flush applies the buffered requests in order, each on its own (a
// failed one does not stop the others), their new tables added to the
// maps together at the end (applyAll).
func (a *maglevActor) flush(ctx actor.Context) {
	buf := a.batch.buf
	a.batch.buf = nil
	reqs := make([]*messages.MaglevApply, len(buf))
	for i, p := range buf {
		reqs[i] = p.req
	}
	replies := make([]any, len(buf))
	for i, r := range a.owner.applyAll(reqs) {
		replies[i] = r
	}
	a.batch.reply(ctx, buf, replies)
}
