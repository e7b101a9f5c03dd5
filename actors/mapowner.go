package actors

import (
	"fmt"

	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// mapActor owns one service or backend map and its mirror. On every
// (re)start it rebuilds the mirror from the map before it handles any
// queued message.
type mapActor[E, K, V comparable] struct {
	name   string
	mirror *mirror[E, K, V]
	// Requests wait here until a flush message, sent to self when the
	// first arrives, comes back: everything queued meanwhile goes to the
	// kernel in one batch.
	buf      []pendingApply[E, K]
	flushing bool
}

type pendingApply[E, K any] struct {
	sender *actor.PID
	req    *messages.MapApply[E, K]
}

// flushMsg tells a map owner to write what it has buffered.
type flushMsg struct{}

func newServiceMapActor(m maps.ServiceMap) actor.Producer {
	return func() actor.Actor {
		return &mapActor[maps.ServiceEntry, maps.ServiceKey, maps.ServiceValue]{name: m.Name(), mirror: newMirror(m, splitService, joinService)}
	}
}

func newBackendMapActor(m maps.BackendMap) actor.Producer {
	return func() actor.Actor {
		return &mapActor[maps.BackendEntry, uint32, maps.BackendValue]{name: m.Name(), mirror: newMirror(m, splitBackend, joinBackend)}
	}
}

func (a *mapActor[E, K, V]) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if err := a.mirror.load(); err != nil {
			// A map we cannot read: fail, so the supervisor restarts us.
			panic(fmt.Errorf("%s: load mirror: %w", a.name, err))
		}
	case *messages.MapApply[E, K]:
		a.buf = append(a.buf, pendingApply[E, K]{ctx.Sender(), m})
		if !a.flushing {
			a.flushing = true
			ctx.Send(ctx.Self(), &flushMsg{})
		}
	case *flushMsg:
		a.flushing = false
		a.flush(ctx)
	case *messages.MapDump:
		a.flush(ctx) // a dump sees every write queued before it
		ctx.Respond(&messages.MapDumped[E]{ReqID: m.ReqID, Entries: a.mirror.dump()})
	}
}

// flush applies the buffered requests in arrival order as one batch: all
// their writes, then all their deletes. Requests in flight together come
// from operations on different frontends (the supervisor runs one
// operation per frontend at a time), so this order is safe: writes first
// keep make-before-break. If the batch fails, each request is applied on
// its own so that each gets its own answer.
func (a *mapActor[E, K, V]) flush(ctx actor.Context) {
	buf := a.buf
	a.buf = nil
	switch len(buf) {
	case 0:
		return
	case 1:
		m := buf[0].req
		w, d, err := a.mirror.apply(m.Writes, m.Deletes)
		ctx.Send(buf[0].sender, &messages.MapApplied{ReqID: m.ReqID, Written: w, Deleted: d, Err: err})
		return
	}
	var ws []E
	var ds []K
	for _, p := range buf {
		ws = append(ws, p.req.Writes...)
		ds = append(ds, p.req.Deletes...)
	}
	if _, _, err := a.mirror.apply(ws, ds); err == nil {
		for _, p := range buf {
			ctx.Send(p.sender, &messages.MapApplied{ReqID: p.req.ReqID})
		}
		return
	}
	for _, p := range buf {
		w, d, err := a.mirror.apply(p.req.Writes, p.req.Deletes)
		ctx.Send(p.sender, &messages.MapApplied{ReqID: p.req.ReqID, Written: w, Deleted: d, Err: err})
	}
}

// revNATActor owns both revNAT maps and their mirrors. Like the other map
// owners it writes the requests queued in its mailbox in one batch.
type revNATActor struct {
	v4, v6   *mirror[maps.RevNATEntry, uint16, maps.RevNATValue]
	buf      []pendingRevNAT
	flushing bool
}

type pendingRevNAT struct {
	sender *actor.PID
	req    *messages.RevNATApply
}

func newRevNATActor(m4, m6 maps.RevNATMap) actor.Producer {
	return func() actor.Actor {
		return &revNATActor{
			v4: newMirror(maps.Map[maps.RevNATEntry, uint16](m4), splitRevNAT, joinRevNAT),
			v6: newMirror(maps.Map[maps.RevNATEntry, uint16](m6), splitRevNAT, joinRevNAT),
		}
	}
}

func (a *revNATActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if err := a.v4.load(); err != nil {
			panic(fmt.Errorf("revnat: load mirror: %w", err))
		}
		if err := a.v6.load(); err != nil {
			panic(fmt.Errorf("revnat: load mirror: %w", err))
		}
	case *messages.RevNATApply:
		a.buf = append(a.buf, pendingRevNAT{ctx.Sender(), m})
		if !a.flushing {
			a.flushing = true
			ctx.Send(ctx.Self(), &flushMsg{})
		}
	case *flushMsg:
		a.flushing = false
		a.flush(ctx)
	case *messages.MapDump:
		a.flush(ctx)
		ctx.Respond(&messages.RevNATDumped{ReqID: m.ReqID, V4: a.v4.dump(), V6: a.v6.dump()})
	}
}

// apply writes then deletes one request's (or a merged batch's) entries.
func (a *revNATActor) apply(writes []maps.RevNATEntry, del4, del6 []uint16) (int, int, error) {
	var w4, w6 []maps.RevNATEntry
	for _, e := range writes {
		if maps.FamilyOf(e.Value.Address) == maps.IPv6 {
			w6 = append(w6, e)
		} else {
			w4 = append(w4, e)
		}
	}
	w, d, err := a.v4.apply(w4, del4)
	if err != nil {
		return w, d, err
	}
	w2, d2, err := a.v6.apply(w6, del6)
	return w + w2, d + d2, err
}

// flush applies the buffered requests as one batch (see mapActor.flush).
func (a *revNATActor) flush(ctx actor.Context) {
	buf := a.buf
	a.buf = nil
	if len(buf) == 0 {
		return
	}
	if len(buf) > 1 {
		var ws []maps.RevNATEntry
		var d4, d6 []uint16
		for _, p := range buf {
			ws = append(ws, p.req.Writes...)
			d4 = append(d4, p.req.Deletes4...)
			d6 = append(d6, p.req.Deletes6...)
		}
		if _, _, err := a.apply(ws, d4, d6); err == nil {
			for _, p := range buf {
				ctx.Send(p.sender, &messages.MapApplied{ReqID: p.req.ReqID})
			}
			return
		}
	}
	for _, p := range buf {
		w, d, err := a.apply(p.req.Writes, p.req.Deletes4, p.req.Deletes6)
		ctx.Send(p.sender, &messages.MapApplied{ReqID: p.req.ReqID, Written: w, Deleted: d, Err: err})
	}
}
