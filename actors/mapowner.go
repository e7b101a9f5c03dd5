package actors

import (
	"fmt"
	"slices"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// mapActor owns one service or backend map and its mirror. On every
// (re)start it rebuilds the mirror from the map before it handles any
// queued message.
type mapActor[E, K comparable] struct {
	name   string
	mirror mirrorOf[E, K]
	batch  batcher[*messages.MapApply[E, K]]
	checks checks
	// ws and ds are the scratch a flush merges its requests' writes and
	// deletes in, kept for the next flush (kept: up to scratchMax).
	ws []E
	ds []K
}

// mirrorOf is what a map owner needs of its mirror (mirror, svcMirror).
type mirrorOf[E, K any] interface {
	load() error
	index()
	apply(writes []E, deletes []K) (written, deleted int, err error)
	dump() maps.Entries[E]
	beginCheck() driftCheck
}

// flushMsg tells a map owner to write what it has buffered.
type flushMsg struct{}

// indexMirror tells a map owner to index its mirror now, if it has not
// yet (the supervisor sends it once restored: see Supervisor.step). A
// mirror is indexed before anything that needs the index anyway (apply,
// reconcile, a dump of an indexed mirror); this only does it ahead of the
// first write, once the restore no longer needs the CPU.
type indexMirror struct{}

// batcher holds the write requests of a map owner until a flush message,
// sent to self when the first one arrives, comes back: everything queued
// in the mailbox meanwhile goes to the kernel in one batch.
type batcher[R any] struct {
	buf      []queuedReq[R]
	reqs     []R // flush's scratch
	flushing bool
}

type queuedReq[R any] struct {
	sender *actor.PID
	req    R
}

func (b *batcher[R]) add(ctx actor.Context, req R) {
	b.buf = append(b.buf, queuedReq[R]{ctx.Sender(), req})
	if !b.flushing {
		b.flushing = true
		ctx.Send(ctx.Self(), &flushMsg{})
	}
}

// flush applies the buffered requests in arrival order. Consecutive
// requests go as one batch (applyAll: all their writes, then all their
// deletes) while their entries (size) sum to at most scratchMax, so that
// the arrays a batch is merged and encoded in stay small enough to keep
// for the next flush: a flush of eight bulk requests of 1,100 entries
// each is three batches in kept arrays, not one of 8,800 in new ones. A
// larger request goes alone. Requests in flight together come from
// operations on different frontends writing different backends (the
// supervisor orders the others), so this order is safe, and writes first
// keep make-before-break. A request alone, or a batch that fails, is
// applied request by request (applyOne) so that each gets its own answer.
//
// A flush of large requests only (earlyMin entries or more each: bulk
// runs) answers each batch as soon as it is applied: the supervisor
// commits the first operations (and their callers send more) while the
// owner writes the next, instead of every operation of the flush waiting
// for its last batch (eight requests of 1,000 single-backend services,
// 2,000 entries each, are four batches: the first answer waited for all
// four). A flush that holds a smaller request (a single call's) answers
// all its requests at the end, together: answered early, the bulk's
// operations would send their next requests to the next owner ahead of
// the single call's, which then waits behind them there (the p99 of
// single upserts beside the batched bulk read 1.9 against 1.6 ms in
// nine harness runs each, with every flush answering early).
//
// The batcher keeps its arrays for the next flush (emptied, and cleared:
// the requests they pointed to are answered), up to scratchMax requests.
func (b *batcher[R]) flush(ctx actor.Context, size func(R) int, applyAll func([]R) error, applyOne func(R) *messages.MapApplied, reqID func(R) uint64) {
	buf := b.buf
	b.buf = nil
	defer func() { clear(buf); b.buf = kept(buf) }()
	if len(buf) == 1 {
		ctx.Send(buf[0].sender, applyOne(buf[0].req))
		return
	}
	replies := make([]any, len(buf)) // sent: not kept
	early := !slices.ContainsFunc(buf, func(p queuedReq[R]) bool { return size(p.req) < earlyMin })
	for lo := 0; lo < len(buf); {
		hi, n := lo+1, size(buf[lo].req)
		for hi < len(buf) && n+size(buf[hi].req) <= scratchMax {
			n += size(buf[hi].req)
			hi++
		}
		b.apply(buf[lo:hi], replies[lo:hi], applyAll, applyOne, reqID)
		if early {
			b.reply(ctx, buf[lo:hi], replies[lo:hi])
		}
		lo = hi
	}
	if !early {
		b.reply(ctx, buf, replies)
	}
}

// earlyMin is the size (entries) from which a request counts as large for
// flush: a flush of large requests only answers each batch once applied.
// Bulk calls' runs are larger (1,000 to 2,200 entries in the bench);
// single calls' requests and the chunks of a bulk taken in beside single
// calls (16 services: 176 service entries with ten backends each) are
// smaller. The number is the core's urgentKeys (an op of that many queue
// keys has its requests sent at once), here counted in entries.
const earlyMin = 256

// apply applies one batch of a flush (merged when it holds several
// requests) and puts each request's answer in replies.
func (b *batcher[R]) apply(batch []queuedReq[R], replies []any, applyAll func([]R) error, applyOne func(R) *messages.MapApplied, reqID func(R) uint64) {
	if len(batch) > 1 {
		reqs := grown(b.reqs, len(batch))
		for _, p := range batch {
			reqs = append(reqs, p.req)
		}
		err := applyAll(reqs)
		clear(reqs)
		b.reqs = kept(reqs)
		if err == nil {
			for i, p := range batch {
				replies[i] = &messages.MapApplied{ReqID: reqID(p.req)}
			}
			return
		}
	}
	for i, p := range batch {
		replies[i] = applyOne(p.req)
	}
}

// reply sends each sender of buf its replies (replies[i] answers
// buf[i]), consecutive ones to one sender in one Replies message.
func (b *batcher[R]) reply(ctx actor.Context, buf []queuedReq[R], replies []any) {
	for i := 0; i < len(buf); {
		j := i + 1
		for j < len(buf) && buf[j].sender.Equal(buf[i].sender) {
			j++
		}
		if j-i == 1 {
			ctx.Send(buf[i].sender, replies[i])
		} else {
			ctx.Send(buf[i].sender, &messages.Replies{Msgs: replies[i:j]})
		}
		i = j
	}
}

func newServiceMapActor(m maps.ServiceMap) actor.Producer {
	return func() actor.Actor {
		return &mapActor[maps.ServiceEntry, maps.ServiceKey]{name: m.Name(), mirror: newSvcMirror(m)}
	}
}

func newBackendMapActor(m maps.BackendMap) actor.Producer {
	return func() actor.Actor {
		if m.Family() == maps.IPv4 {
			// Half the memory per backend: the IPv4 map only holds IPv4
			// addresses; and the values are kept in pages by backend ID.
			return &mapActor[maps.BackendEntry, uint32]{name: m.Name(), mirror: newMirrorIndexed(m, splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4], newBackend4Index)}
		}
		return &mapActor[maps.BackendEntry, uint32]{name: m.Name(), mirror: newMirrorIndexed(m, splitBackend(addrkey.IPOf), joinBackend[addrkey.IP], newBackend6Index)}
	}
}

// newMembersActor owns lb_members: weights, node-local flags and
// maintenance memberships, written by the core beside the backends.
func newMembersActor(m maps.MembersMap) actor.Producer {
	return func() actor.Actor {
		return &mapActor[maps.MemberEntry, maps.MemberKey]{name: m.Name(), mirror: newMirror(maps.Map[maps.MemberEntry, maps.MemberKey](m),
			func(e maps.MemberEntry) (maps.MemberKey, maps.MemberValue) { return e.Key, e.Value },
			func(k maps.MemberKey, v maps.MemberValue) maps.MemberEntry { return maps.MemberEntry{Key: k, Value: v} })}
	}
}

// newAffinityMatchActor owns lb_affinity_match: which backends a
// session-affinity service may keep a client on.
func newAffinityMatchActor(m maps.AffinityMatchMap) actor.Producer {
	return func() actor.Actor {
		return &mapActor[maps.AffinityMatchKey, maps.AffinityMatchKey]{name: m.Name(), mirror: newMirror(maps.Map[maps.AffinityMatchKey, maps.AffinityMatchKey](m),
			func(k maps.AffinityMatchKey) (maps.AffinityMatchKey, struct{}) { return k, struct{}{} },
			func(k maps.AffinityMatchKey, _ struct{}) maps.AffinityMatchKey { return k })}
	}
}

func (a *mapActor[E, K]) Receive(ctx actor.Context) {
	messages.EachRequest(ctx.Message(), func(m any) { a.receive(ctx, m) })
}

func (a *mapActor[E, K]) receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *actor.Started:
		if err := a.mirror.load(); err != nil {
			// A map we cannot read: fail, so the supervisor restarts us.
			panic(fmt.Errorf("%s: load mirror: %w", a.name, err))
		}
	case *messages.MapApply[E, K]:
		a.batch.add(ctx, m)
	case *flushMsg:
		a.batch.flushing = false
		a.flush(ctx)
	case *messages.MapDump:
		a.flush(ctx) // a dump sees every write queued before it
		ctx.Respond(&messages.MapDumped[E]{ReqID: m.ReqID, Entries: a.mirror.dump()})
	case *indexMirror:
		a.mirror.index()
	default:
		a.checks.receive(ctx, msg, a.beginCheck)
	}
}

// beginCheck begins a drift check of the map once every write queued
// before it is in.
func (a *mapActor[E, K]) beginCheck(ctx actor.Context) driftCheck {
	a.flush(ctx)
	return a.mirror.beginCheck()
}

func (a *mapActor[E, K]) flush(ctx actor.Context) {
	a.batch.flush(ctx, func(r *messages.MapApply[E, K]) int { return len(r.Writes) + len(r.Deletes) }, func(reqs []*messages.MapApply[E, K]) error {
		ws := merged(a.ws, reqs, func(r *messages.MapApply[E, K]) []E { return r.Writes })
		ds := merged(a.ds, reqs, func(r *messages.MapApply[E, K]) []K { return r.Deletes })
		_, _, err := a.mirror.apply(ws, ds) // keeps neither slice
		a.ws, a.ds = kept(ws), kept(ds)
		return err
	}, func(r *messages.MapApply[E, K]) *messages.MapApplied {
		w, d, err := a.mirror.apply(r.Writes, r.Deletes)
		return &messages.MapApplied{ReqID: r.ReqID, Written: w, Deleted: d, Err: err}
	}, func(r *messages.MapApply[E, K]) uint64 { return r.ReqID })
}

// merged returns the slices of(r) of reqs one after the other, in buf if
// it has the room, else in one new array of exactly their length (grown):
// appended into buf as it was, the merge of four requests of a thousand
// entries grew past scratchMax and was made again on every flush.
func merged[R, E any](buf []E, reqs []R, of func(R) []E) []E {
	n := 0
	for _, r := range reqs {
		n += len(of(r))
	}
	out := grown(buf, n)
	for _, r := range reqs {
		out = append(out, of(r)...)
	}
	return out
}

// revNATActor owns both revNAT maps and their mirrors. Like the other map
// owners it writes the requests queued in its mailbox in one batch.
type revNATActor struct {
	v4, v6 mirrorOf[maps.RevNATEntry, uint16]
	batch  batcher[*messages.RevNATApply]
	checks checks
	// The scratch of apply (each family's writes, when a batch mixes
	// them) and of a flush (the merged writes and deletes, merged), kept
	// for the next (kept).
	w4, w6, ws []maps.RevNATEntry
	d4, d6     []uint16
}

func newRevNATActor(m4, m6 maps.RevNATMap) actor.Producer {
	return func() actor.Actor {
		return &revNATActor{
			v4: newMirrorIndexed(maps.Map[maps.RevNATEntry, uint16](m4), splitRevNAT(addrkey.IP4Of), joinRevNAT[addrkey.IP4], newRevNATIndex[revNATVal[addrkey.IP4]]),
			v6: newMirrorIndexed(maps.Map[maps.RevNATEntry, uint16](m6), splitRevNAT(addrkey.IPOf), joinRevNAT[addrkey.IP], newRevNATIndex[revNATVal[addrkey.IP]]),
		}
	}
}

func (a *revNATActor) Receive(ctx actor.Context) {
	messages.EachRequest(ctx.Message(), func(m any) { a.receive(ctx, m) })
}

func (a *revNATActor) receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *actor.Started:
		if err := a.v4.load(); err != nil {
			panic(fmt.Errorf("revnat: load mirror: %w", err))
		}
		if err := a.v6.load(); err != nil {
			panic(fmt.Errorf("revnat: load mirror: %w", err))
		}
	case *messages.RevNATApply:
		a.batch.add(ctx, m)
	case *flushMsg:
		a.batch.flushing = false
		a.flush(ctx)
	case *messages.MapDump:
		a.flush(ctx)
		ctx.Respond(&messages.RevNATDumped{ReqID: m.ReqID, V4: a.v4.dump().Slice(), V6: a.v6.dump().Slice()})
	case *indexMirror:
		a.v4.index()
		a.v6.index()
	default:
		a.checks.receive(ctx, msg, a.beginCheck)
	}
}

// beginCheck begins a drift check of both maps once every write queued
// before it is in.
func (a *revNATActor) beginCheck(ctx actor.Context) driftCheck {
	a.flush(ctx)
	return pairCheck{a.v4.beginCheck(), a.v6.beginCheck()}
}

// apply writes then deletes one request's (or a merged batch's) entries.
func (a *revNATActor) apply(writes []maps.RevNATEntry, del4, del6 []uint16) (int, int, error) {
	n6 := 0
	for _, e := range writes {
		if maps.FamilyOf(e.Value.Address) == maps.IPv6 {
			n6++
		}
	}
	// Writes of one family (a cluster's, mostly) go to its mirror as they
	// are (the mirrors keep neither slice nor write to it); mixed ones are
	// split into buffers sized at once, not grown by doubling.
	var w4, w6 []maps.RevNATEntry
	switch n6 {
	case 0:
		w4 = writes
	case len(writes):
		w6 = writes
	default:
		w4, w6 = grown(a.w4, len(writes)-n6), grown(a.w6, n6)
		for _, e := range writes {
			if maps.FamilyOf(e.Value.Address) == maps.IPv6 {
				w6 = append(w6, e)
			} else {
				w4 = append(w4, e)
			}
		}
		defer func() { a.w4, a.w6 = kept(w4), kept(w6) }()
	}
	w, d, err := a.v4.apply(w4, del4)
	if err != nil {
		return w, d, err
	}
	w2, d2, err := a.v6.apply(w6, del6)
	return w + w2, d + d2, err
}

func (a *revNATActor) flush(ctx actor.Context) {
	a.batch.flush(ctx, func(r *messages.RevNATApply) int { return len(r.Writes) + len(r.Deletes4) + len(r.Deletes6) }, func(reqs []*messages.RevNATApply) error {
		ws := merged(a.ws, reqs, func(r *messages.RevNATApply) []maps.RevNATEntry { return r.Writes })
		d4 := merged(a.d4, reqs, func(r *messages.RevNATApply) []uint16 { return r.Deletes4 })
		d6 := merged(a.d6, reqs, func(r *messages.RevNATApply) []uint16 { return r.Deletes6 })
		_, _, err := a.apply(ws, d4, d6)
		a.ws, a.d4, a.d6 = kept(ws), kept(d4), kept(d6)
		return err
	}, func(r *messages.RevNATApply) *messages.MapApplied {
		w, d, err := a.apply(r.Writes, r.Deletes4, r.Deletes6)
		return &messages.MapApplied{ReqID: r.ReqID, Written: w, Deleted: d, Err: err}
	}, func(r *messages.RevNATApply) uint64 { return r.ReqID })
}
