package actors

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/actorlb/actorlb/internal/engine"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/sirupsen/logrus"
)

// SupervisorName is the supervisor's key in the restart counts.
const SupervisorName = "supervisor"

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
	// OnBackendsLeft: see engine.Config.
	OnBackendsLeft func(service lb.ServiceID, backends []lb.L3n4Addr)
	// Dispatcher runs the mailboxes of the keeper, the supervisor and the
	// children (nil: protoactor's default, a goroutine per mailbox run).
	Dispatcher actor.Dispatcher
	// NoIDLease makes every new service and backend ask the allocator for
	// its IDs (tests of that path); by default the supervisor keeps a
	// lease of free IDs (engine.Config.LeaseServiceIDs).
	NoIDLease bool
	// QuietAfter is how long the core must rest (no op in flight) while
	// it keeps more for reuse than an engine at rest does before the
	// supervisor tells it Quiet, and it trims that (default 1 s).
	QuietAfter time.Duration
}

// quietAfter is cfg.QuietAfter, or its default.
func (cfg Config) quietAfter() time.Duration {
	if cfg.QuietAfter > 0 {
		return cfg.QuietAfter
	}
	return time.Second
}

// The ID lease the supervisor keeps by default: enough for 64 new
// services of 16 new backends between two refills.
const (
	leaseServiceIDs = 64
	leaseBackendIDs = 1024
)

// dispatch is the props option of cfg's dispatcher.
func (cfg Config) dispatch() actor.PropsOption {
	if cfg.Dispatcher == nil {
		return actor.WithDispatcher(actor.NewDefaultDispatcher(Throughput))
	}
	return actor.WithDispatcher(cfg.Dispatcher)
}

// Supervisor is the engine's actor: it spawns and supervises the children
// and translates messages into inputs of its core (internal/engine), whose
// outputs it delivers: answers to callers at once, requests to children
// once its mailbox holds nothing older than them (see flush).
type Supervisor struct {
	cfg      Config
	log      *logrus.Entry
	strategy actor.SupervisorStrategy
	self     *actor.PID
	children map[string]*actor.PID
	core     *engine.Core
	restarts map[string]int
	stopping bool
	// flushing is set while a flush message to self is in the mailbox;
	// takingIn while a takeIn message is.
	flushing, takingIn bool
	// up is set when the core has just restored (its OnUp ran in the
	// step): step then tells the map owners to index their mirrors.
	up bool
	// quiet tells the core Quiet once it has rested for
	// Config.QuietAfter (armed while engine.Core.Resting, see step): its
	// timer sends a quiet message of the generation it was armed in,
	// which counts only if no arming or disarming came since.
	quiet      *time.Timer
	quietGen   uint64
	quietArmed bool
}

// quiet is sent by the supervisor's quiet timer.
type quiet struct{ gen uint64 }

// mirrorOwners are the children that keep a mirror of their maps, which
// they index once the core has restored (indexMirror).
var mirrorOwners = []string{
	engine.ChildService4, engine.ChildService6, engine.ChildBackend4, engine.ChildBackend6,
	engine.ChildRevNAT, engine.ChildMembers, engine.ChildAffinity, engine.ChildSourceRange,
}

// flush tells the supervisor to send the core's requests: it comes back
// after the messages that were in the mailbox when the first request was
// queued, so that the requests of all the operations they advance go to
// each child in one Batch.
type flush struct{}

// takeIn tells the supervisor to have its core take in the next chunk of
// a large call (engine.TakeIn): it comes back after the messages that
// came meanwhile, so that single calls go between the chunks.
type takeIn struct{}

// NewSupervisorProducer returns the producer of the supervisor actor: each
// incarnation starts with an empty core and restores from the maps.
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
	restarts := map[string]int{} // survives supervisor restarts; only ever touched by the current incarnation
	var incarnations atomic.Int64
	return func() actor.Actor {
		if incarnations.Add(1) > 1 {
			restarts[SupervisorName]++
		}
		log := cfg.Log.WithField("actor", "supervisor")
		s := &Supervisor{
			cfg:      cfg,
			log:      log,
			children: map[string]*actor.PID{},
			restarts: restarts,
		}
		onUp := func() {
			s.up = true
			if cfg.OnUp != nil {
				cfg.OnUp()
			}
		}
		ecfg := engine.Config{
			Log: log, Restore: cfg.Restore, MaxResends: cfg.MaxResends, Restarts: restarts,
			OnUp: onUp, OnDown: cfg.OnDown, OnRestoreFailed: cfg.OnRestoreFailed, OnBackendsLeft: cfg.OnBackendsLeft,
		}
		if !cfg.NoIDLease {
			ecfg.LeaseServiceIDs, ecfg.LeaseBackendIDs = leaseServiceIDs, leaseBackendIDs
		}
		s.core = engine.New(ecfg)
		s.strategy = actor.NewOneForOneStrategy(cfg.MaxRestarts, cfg.RestartWindow, actor.DefaultDecider)
		return s
	}
}

// HandleFailure makes the supervisor the strategy of its children. It runs
// on the supervisor's goroutine: it counts the failure, lets the
// one-for-one strategy restart the child, then tells itself which request
// was lost with the crash.
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

type childStopped struct{ child string }

func childName(pid *actor.PID) string {
	id := pid.GetId()
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '/' {
			return id[i+1:]
		}
	}
	return id
}

// Receive translates the actor's messages into inputs of the core. If
// handling a call panics, its caller is answered with an error before the
// panic goes on to the keeper (which restarts the supervisor).
func (s *Supervisor) Receive(ctx actor.Context) {
	defer func() {
		if r := recover(); r != nil {
			s.log.WithField("panic", fmt.Sprint(r)).WithField("message", fmt.Sprintf("%T", ctx.Message())).
				Error("supervisor failed; it restarts and restores from the maps\n" + string(debug.Stack()))
			if call, ok := ctx.Message().(messages.Call); ok {
				call.Answer(call.Failed(fmt.Errorf("engine failed and restarts: %v", r)))
			}
			panic(r)
		}
	}()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.self = ctx.Self()
		for _, name := range engine.Children {
			s.spawn(ctx, name)
		}
		s.step(ctx, engine.Start{})
	case *actor.Restarting, *actor.Stopping:
		s.stopping = true
		s.step(ctx, engine.Stop{Err: engine.ErrEngineRestarted})
		if s.quiet != nil {
			s.quiet.Stop()
		}
	case *actor.Terminated:
		// A child stopped for good (retries exhausted, or stopped from
		// outside). Terminated is a system message: it overtakes the
		// replies the child sent before it stopped, which are still
		// queued; so the respawn is done by a message to self, handled
		// after them.
		if _, ok := s.children[childName(m.Who)]; ok && !s.stopping {
			ctx.Send(ctx.Self(), &childStopped{child: childName(m.Who)})
		}
	case *childStopped:
		if !s.stopping {
			s.spawn(ctx, m.child)
			s.step(ctx, engine.ChildStopped{Child: m.child})
		}
	case *childFailed:
		s.step(ctx, engine.ChildFailed{Child: m.child, Failed: m.failed})
	case *takeIn:
		s.takingIn = false
		s.step(ctx, engine.TakeIn{})
	case *quiet:
		if m.gen == s.quietGen && s.quietArmed && !s.stopping {
			s.step(ctx, engine.Quiet{})
		}
	case *flush:
		s.flushing = false
		s.flush(ctx)
	case messages.Reply, *messages.Replies, messages.Call:
		s.step(ctx, m)
	}
}

// step feeds the core one input and delivers what it produced. Once the
// core has restored, the map owners index their mirrors: not while the
// supervisor rebuilds, which needs the CPU (two cores, say, shared by the
// rebuild's two halves and the owners), but before any write reaches them.
func (s *Supervisor) step(ctx actor.Context, in engine.Input) {
	s.core.Step(in)
	for _, a := range s.core.Answers() {
		a.Call.Answer(a.Reply)
	}
	switch {
	case s.core.Urgent():
		s.flush(ctx) // the flush queued, if any, finds what comes after
	case !s.flushing && s.core.HasReady():
		s.flushing = true
		ctx.Send(ctx.Self(), &flush{})
	}
	if !s.takingIn && s.core.HasIntake() { // after the flush: this chunk's requests go first
		s.takingIn = true
		ctx.Send(ctx.Self(), &takeIn{})
	}
	if r := s.core.Resting(); r != s.quietArmed && !s.stopping {
		s.armQuiet(ctx, r)
	}
	if s.up { // after the flush is queued: the allocator's snapshot goes first
		s.up = false
		for _, name := range mirrorOwners {
			ctx.Send(s.children[name], &indexMirror{})
		}
	}
}

// armQuiet arms the quiet timer (on: the core rests and keeps more than
// at rest) or disarms it; a quiet message of an earlier arming is then
// ignored.
func (s *Supervisor) armQuiet(ctx actor.Context, on bool) {
	s.quietArmed = on
	s.quietGen++
	if s.quiet != nil {
		s.quiet.Stop()
		s.quiet = nil
	}
	if on {
		msg, self, root := &quiet{gen: s.quietGen}, ctx.Self(), ctx.ActorSystem().Root
		s.quiet = time.AfterFunc(s.cfg.quietAfter(), func() { root.Send(self, msg) })
	}
}

// flush sends the core's outbox.
func (s *Supervisor) flush(ctx actor.Context) {
	for _, out := range s.core.Ready().Requests {
		ctx.Request(s.children[out.Child], out.Msg)
	}
	s.core.Advance()
}

func (s *Supervisor) props(name string) *actor.Props {
	var producer actor.Producer
	mp := s.cfg.Maps
	switch name {
	case engine.ChildAllocator:
		producer = newAllocatorProducer()
	case engine.ChildService4:
		producer = newServiceMapActor(mp.Service4)
	case engine.ChildService6:
		producer = newServiceMapActor(mp.Service6)
	case engine.ChildBackend4:
		producer = newBackendMapActor(mp.Backend4)
	case engine.ChildBackend6:
		producer = newBackendMapActor(mp.Backend6)
	case engine.ChildRevNAT:
		producer = newRevNATActor(mp.RevNAT4, mp.RevNAT6)
	case engine.ChildMembers:
		producer = newMembersActor(mp.Members)
	case engine.ChildAffinity:
		producer = newAffinityMatchActor(mp.AffinityMatch)
	case engine.ChildMaglev:
		producer = newMaglevActor(mp.Maglev4, mp.Maglev6)
	case engine.ChildSourceRange:
		producer = newSourceRangeActor(mp.SourceRange4, mp.SourceRange6)
	}
	return actor.PropsFromProducer(producer, actor.WithReceiverMiddleware(s.cfg.ChildMiddleware...), s.cfg.dispatch())
}

func (s *Supervisor) spawn(ctx actor.Context, name string) {
	pid, err := ctx.SpawnNamed(s.props(name), name)
	if err != nil {
		panic(fmt.Errorf("spawn %s: %w", name, err))
	}
	s.children[name] = pid
}
