package actors

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/sirupsen/logrus"
)

type (
	mapAppliedT    = messages.MapApplied
	svcDumpedT     = messages.MapDumped[maps.ServiceEntry]
	beDumpedT      = messages.MapDumped[maps.BackendEntry]
	revDumpedT     = messages.RevNATDumped
	allocAcquiredT = messages.AllocAcquired
	allocReleasedT = messages.AllocReleased
	allocDoneT     = messages.AllocDone
)

// Child names (PIDs are "<supervisor>/<name>").
const (
	ChildAllocator = "alloc"
	ChildService4  = "svc4"
	ChildService6  = "svc6"
	ChildBackend4  = "be4"
	ChildBackend6  = "be6"
	ChildRevNAT    = "revnat"
)

// SupervisorName is the supervisor's key in the restart counts.
const SupervisorName = "supervisor"

// Children lists the child names.
var Children = []string{ChildAllocator, ChildService4, ChildService6, ChildBackend4, ChildBackend6, ChildRevNAT}

func svcChild(f maps.Family) string {
	if f == maps.IPv6 {
		return ChildService6
	}
	return ChildService4
}

func beChild(f maps.Family) string {
	if f == maps.IPv6 {
		return ChildBackend6
	}
	return ChildBackend4
}

// Config configures the supervisor.
type Config struct {
	Maps *maps.LBMaps
	Log  *logrus.Entry
	// Restore rebuilds the table from the maps at start; when false the
	// maps are emptied instead.
	Restore bool
	// ChildMiddleware is added to every child (failure injection in tests).
	ChildMiddleware []actor.ReceiverMiddleware
	// MaxRestarts children may do within RestartWindow before they are
	// stopped and respawned (default 10 in 10 s).
	MaxRestarts   int
	RestartWindow time.Duration
	// MaxResends bounds how often a request lost in a child crash is sent
	// again (default 3).
	MaxResends int
	// OnStopped runs when the keeper has stopped with the whole tree.
	OnStopped func()
	// OnUp runs when an incarnation of the supervisor has restored and
	// serves; OnDown when it stops serving (restart or stop). Calls in
	// flight at OnDown may be lost: the edge sends them again.
	OnUp, OnDown func()
	// OnRestoreFailed runs when restore fails; the incarnation serves
	// nothing and answers every call with err.
	OnRestoreFailed func(err error)
}

// Supervisor is the engine: it owns the table of services and coordinates
// every operation with its children by messages.
type Supervisor struct {
	cfg      Config
	log      *logrus.Entry
	strategy actor.SupervisorStrategy
	self     *actor.PID
	children map[string]*actor.PID

	services   map[lb.ServiceID]*table.Service
	byFE       packedmap.Map[lb.L3n4Addr, lb.ServiceID] // frontend -> service (IPv4 keys packed)
	users      packedmap.Map[backendKey, users]         // backend -> services using it (IPv4 keys packed)
	shared     map[backendKey][]lb.ServiceID            // users beyond the first, of shared backends
	refreshes  int
	standalone map[lb.ServiceID]lb.L3n4Addr // revNAT entries without service

	queues     map[qkey]queue
	queuesPeak int // most keys queues held since it was last made
	reqs       pendingTable
	inflight   int
	// outbox holds requests not yet sent, per child (see request).
	outbox      map[string][]*pendingReq
	outboxFlush bool
	// requests sent and the messages that carried them (Stats).
	requestsSent, childMessages uint64
	steps                       map[string]*messages.StepTiming // time spent per step, by name

	ready    bool
	readyErr error
	deferred []any
	restore  messages.RestoreStats
	restarts map[string]int
	resent   int
	stopping bool
}

// NewSupervisorProducer returns the producer of the supervisor actor: each
// incarnation starts empty and restores from the maps.
func NewSupervisorProducer(cfg Config) actor.Producer {
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.MaxRestarts == 0 {
		cfg.MaxRestarts = 10
	}
	if cfg.RestartWindow == 0 {
		cfg.RestartWindow = 10 * time.Second
	}
	if cfg.MaxResends == 0 {
		cfg.MaxResends = 3
	}
	if cfg.OnUp == nil {
		cfg.OnUp = func() {}
	}
	if cfg.OnDown == nil {
		cfg.OnDown = func() {}
	}
	if cfg.OnRestoreFailed == nil {
		cfg.OnRestoreFailed = func(error) {}
	}
	restarts := map[string]int{} // survives supervisor restarts; only ever touched by the current incarnation
	var incarnations atomic.Int64
	return func() actor.Actor {
		if incarnations.Add(1) > 1 {
			restarts[SupervisorName]++
		}
		s := &Supervisor{
			cfg:        cfg,
			log:        cfg.Log.WithField("actor", "supervisor"),
			children:   map[string]*actor.PID{},
			services:   map[lb.ServiceID]*table.Service{},
			byFE:       packedmap.New[lb.L3n4Addr, lb.ServiceID](0, frontendPacker{}),
			users:      packedmap.New[backendKey, users](0, backendPacker{}),
			standalone: map[lb.ServiceID]lb.L3n4Addr{},
			queues:     map[qkey]queue{},
			restarts:   restarts,
		}
		s.strategy = actor.NewOneForOneStrategy(cfg.MaxRestarts, cfg.RestartWindow, actor.DefaultDecider)
		return s
	}
}

// HandleFailure makes the supervisor the strategy of its children. It runs
// on the supervisor's goroutine: it counts the failure, lets the
// one-for-one strategy restart the child, then asks itself to resend the
// request that was lost with the crash.
func (s *Supervisor) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, message interface{}) {
	name := childName(child)
	s.restarts[name]++
	s.log.WithFields(logrus.Fields{"child": name, "reason": fmt.Sprint(reason)}).Warn("child actor failed; restarting it")
	failed := actor.UnwrapEnvelopeMessage(message)
	s.strategy.HandleFailure(sys, sup, child, rs, reason, message)
	sys.Root.Send(s.self, &childFailed{child: name, failed: failed})
}

type childFailed struct {
	child  string
	failed any
}

func childName(pid *actor.PID) string {
	id := pid.GetId()
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '/' {
			return id[i+1:]
		}
	}
	return id
}

// Receive dispatches lifecycle, edge and child messages. If handling an
// edge request panics, its caller is answered with an error before the
// panic goes on to the guardian (which restarts the supervisor).
func (s *Supervisor) Receive(ctx actor.Context) {
	defer func() {
		if r := recover(); r != nil {
			s.log.WithField("panic", fmt.Sprint(r)).WithField("message", fmt.Sprintf("%T", ctx.Message())).
				Error("supervisor failed; it restarts and restores from the maps\n" + string(debug.Stack()))
			s.failEdge(ctx.Message(), fmt.Errorf("engine failed and restarts: %v", r))
			panic(r)
		}
	}()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.self = ctx.Self()
		for _, name := range Children {
			s.spawn(ctx, name)
		}
		s.startRestore(ctx)
		return
	case *actor.Restarting, *actor.Stopping:
		s.stopping = true
		s.cfg.OnDown()
		s.abortAll(ErrEngineRestarted)
		return
	case *actor.Terminated:
		s.onTerminated(ctx, m)
		return
	case *childFailed:
		s.onChildFailed(ctx, m)
		return
	case *childStopped:
		if !s.stopping {
			s.onChildStopped(ctx, m.child)
		}
		return
	case *sendOutbox:
		s.flushOutbox(ctx)
		return
	case *messages.Replies:
		s.onReplies(ctx, m)
		return
	}
	if id, ok := replyID(ctx.Message()); ok {
		s.onReply(ctx, id, ctx.Message())
		return
	}
	s.handleEdge(ctx, ctx.Message())
}

func (s *Supervisor) props(name string) *actor.Props {
	var producer actor.Producer
	mp := s.cfg.Maps
	switch name {
	case ChildAllocator:
		producer = newAllocatorProducer()
	case ChildService4:
		producer = newServiceMapActor(mp.Service4)
	case ChildService6:
		producer = newServiceMapActor(mp.Service6)
	case ChildBackend4:
		producer = newBackendMapActor(mp.Backend4)
	case ChildBackend6:
		producer = newBackendMapActor(mp.Backend6)
	case ChildRevNAT:
		producer = newRevNATActor(mp.RevNAT4, mp.RevNAT6)
	}
	return actor.PropsFromProducer(producer, actor.WithReceiverMiddleware(s.cfg.ChildMiddleware...))
}

func (s *Supervisor) spawn(ctx actor.Context, name string) {
	pid, err := ctx.SpawnNamed(s.props(name), name)
	if err != nil {
		panic(fmt.Errorf("spawn %s: %w", name, err))
	}
	s.children[name] = pid
}

// onTerminated learns that a child stopped for good (retries exhausted or
// stopped from outside). Terminated is a system message: it overtakes the
// replies the child sent before it stopped, which are still queued. So the
// respawn is done by a message to self, handled after those replies.
func (s *Supervisor) onTerminated(ctx actor.Context, m *actor.Terminated) {
	name := childName(m.Who)
	if _, ok := s.children[name]; !ok || s.stopping {
		return // children stop with us: do not respawn them
	}
	ctx.Send(ctx.Self(), &childStopped{child: name})
}

type childStopped struct{ child string }

// onChildStopped respawns a stopped child, restores the allocator from the
// table if it was the allocator, and resends what the child owed.
func (s *Supervisor) onChildStopped(ctx actor.Context, name string) {
	s.restarts[name]++
	s.log.WithField("child", name).Warn("child actor stopped; respawning it")
	s.spawn(ctx, name)
	if name == ChildAllocator {
		s.restoreAllocator(ctx, logAllocatorRestore)
	}
	for id, p := range s.reqs.all {
		if p.child == name && p.sent {
			s.resend(ctx, id, p)
		}
	}
}

func (s *Supervisor) onChildFailed(ctx actor.Context, m *childFailed) {
	if m.child == ChildAllocator {
		s.restoreAllocator(ctx, logAllocatorRestore)
	}
	// Every request the child owed is sent again: the one it failed on
	// (counted against its retries) and those it had buffered or queued
	// (map owners buffer requests until they flush; resending is
	// idempotent, and a second reply is ignored).
	failed := map[uint64]bool{}
	eachRequest(m.failed, func(msg any) {
		if id, ok := requestID(msg); ok {
			failed[id] = true
		}
	})
	for id, p := range s.reqs.all {
		if p.child != m.child || !p.sent {
			continue // requests still in the outbox go to the new incarnation anyway
		}
		switch {
		case failed[id]:
			s.resend(ctx, id, p)
		case m.child != ChildAllocator:
			// Map owners only: their requests are idempotent. The
			// allocator's are not (a second acquire takes a second
			// reference); its queued requests survive the restart.
			s.resendFree(ctx, id, p)
		}
	}
}

// resendFree sends a request again without counting a try.
func (s *Supervisor) resendFree(ctx actor.Context, id uint64, p *pendingReq) {
	if superseded(p.msg) {
		s.onReply(ctx, id, &messages.AllocDone{ReqID: id})
		return
	}
	s.resent++
	s.enqueue(ctx, p)
}

// superseded reports whether a lost request must not be sent again: an
// allocator snapshot is replaced by the fresh one sent after the crash.
func superseded(msg any) bool {
	_, ok := msg.(*messages.AllocRestore)
	return ok
}

func (s *Supervisor) resend(ctx actor.Context, id uint64, p *pendingReq) {
	if superseded(p.msg) {
		s.onReply(ctx, id, &messages.AllocDone{ReqID: id})
		return
	}
	p.tries++
	if p.tries > s.cfg.MaxResends {
		s.failRequest(ctx, id, fmt.Errorf("%s failed %d times on this request", p.child, p.tries))
		return
	}
	s.resent++
	s.enqueue(ctx, p)
}

// eachRequest calls fn on each request msg carries: those of a Batch, in
// order, or msg itself.
func eachRequest(msg any, fn func(any)) {
	if b, ok := msg.(*messages.Batch); ok {
		for _, m := range b.Msgs {
			fn(m)
		}
		return
	}
	fn(msg)
}

func requestID(msg any) (uint64, bool) {
	switch m := msg.(type) {
	case *messages.ServiceApply:
		return m.ReqID, true
	case *messages.BackendApply:
		return m.ReqID, true
	case *messages.RevNATApply:
		return m.ReqID, true
	case *messages.MapDump:
		return m.ReqID, true
	case *messages.AllocAcquire:
		return m.ReqID, true
	case *messages.AllocRelease:
		return m.ReqID, true
	case *messages.AllocUnhold:
		return m.ReqID, true
	case *messages.AllocRestore:
		return m.ReqID, true
	case *messages.AllocReserve:
		return m.ReqID, true
	case *messages.AllocDrop:
		return m.ReqID, true
	}
	return 0, false
}

// abortAll answers every op in flight with err (the supervisor is going
// away; restore will repair what they left).
func (s *Supervisor) abortAll(err error) {
	seen := map[*op]bool{}
	for _, p := range s.reqs.all {
		if !seen[p.op] && !p.op.done {
			seen[p.op] = true
			p.op.done = true
			if p.op.finish != nil {
				p.op.finish(s, err)
			}
		}
	}
	for _, q := range s.queues {
		for o := range q.all {
			if !seen[o] && !o.done {
				seen[o] = true
				o.done = true
				if o.finish != nil {
					o.finish(s, err)
				}
			}
		}
	}
	s.reqs = pendingTable{}
	s.queues = map[qkey]queue{}
	s.outbox = nil
}

// allocBindings computes the allocator's state from the table: one
// reference per service using a backend (the backend index counts them),
// standalone revNAT IDs reserved, plus what ops in flight hold.
func (s *Supervisor) allocBindings() (svcs, bes []messages.AllocBinding, held []lb.BackendID) {
	svcs = make([]messages.AllocBinding, 0, len(s.services)+len(s.standalone))
	for id, svc := range s.services {
		svcs = append(svcs, messages.AllocBinding{Key: svc.Frontend(), ID: uint64(id), Refs: 1})
	}
	for id, addr := range s.standalone {
		svcs = append(svcs, messages.AllocBinding{Key: addr, ID: uint64(id)})
	}
	// References held by ops in flight, by backend (few).
	var extra map[backendKey]messages.AllocBinding
	seen := map[*op]bool{}
	for _, p := range s.reqs.all {
		if seen[p.op] {
			continue
		}
		seen[p.op] = true
		svcs = append(svcs, p.op.svcHolds...)
		for _, h := range p.op.beHolds {
			if extra == nil {
				extra = map[backendKey]messages.AllocBinding{}
			}
			k := compactKey(h.Key)
			b := extra[k]
			b.Key, b.ID, b.Refs = h.Key, h.ID, b.Refs+1
			extra[k] = b
		}
		held = append(held, p.op.freed...)
	}
	bes = make([]messages.AllocBinding, 0, s.users.Len()+len(extra))
	for k, u := range s.users.All {
		b := messages.AllocBinding{Key: k.l3n4(), ID: uint64(u.id), Refs: u.n()}
		if x, ok := extra[k]; ok {
			b.Refs += x.Refs
			delete(extra, k)
		}
		bes = append(bes, b)
	}
	for _, x := range extra {
		bes = append(bes, x)
	}
	return svcs, bes, held
}

// restoreAllocator sends the allocator its state, rebuilt from the table
// and the IDs held by ops in flight, ahead of every request queued for it
// (restoreFirst); failed runs if the allocator refuses it.
func (s *Supervisor) restoreAllocator(ctx actor.Context, failed func(s *Supervisor, err error)) {
	svcs, bes, held := s.allocBindings()
	o := &op{finish: func(s *Supervisor, err error) {
		if err != nil {
			failed(s, err)
		}
	}}
	o.steps = []step{{name: "restore allocator", do: func(s *Supervisor, ctx actor.Context, o *op) {
		id := s.newReqID()
		s.request(ctx, o, ChildAllocator, id, &messages.AllocRestore{ReqID: id, Services: svcs, Backends: bes, Held: held}, done)
		s.restoreFirst(ctx, id)
	}}}
	s.begin(ctx, o)
}

// logAllocatorRestore is restoreAllocator's failure handler after an
// allocator restart: the error is logged (a bug, or maps changed under us).
func logAllocatorRestore(s *Supervisor, err error) {
	s.log.WithError(err).Error("restore allocator after restart")
}

// restoreFirst moves the allocator snapshot id to the front of the
// allocator's outbox. The requests queued there are not in the snapshot,
// so they must reach the allocator after it; an older snapshot still queued
// is superseded by this one and answered as done.
func (s *Supervisor) restoreFirst(ctx actor.Context, id uint64) {
	ps := s.outbox[ChildAllocator]
	snap, _ := s.reqs.get(id)
	out := make([]*pendingReq, 0, len(ps))
	out = append(out, snap)
	var stale []uint64
	for _, p := range ps {
		if p == snap {
			continue
		}
		if r, ok := p.msg.(*messages.AllocRestore); ok {
			stale = append(stale, r.ReqID)
			continue
		}
		out = append(out, p)
	}
	s.outbox[ChildAllocator] = out
	for _, sid := range stale {
		s.onReply(ctx, sid, &messages.AllocDone{ReqID: sid})
	}
}
