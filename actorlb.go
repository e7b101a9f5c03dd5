package actorlb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorlb/actorlb/actors"
	"github.com/actorlb/actorlb/internal/actorsys"
	"github.com/actorlb/actorlb/internal/engine"
	"github.com/actorlb/actorlb/internal/enginetest"
	"github.com/actorlb/actorlb/internal/maglev"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/sirupsen/logrus"
)

// Sentinels, re-exported from the engine.
var (
	ErrServiceNotFound  = engine.ErrServiceNotFound
	ErrServiceIDInUse   = engine.ErrServiceIDInUse
	ErrFrontendInUse    = engine.ErrFrontendInUse
	ErrFrontendOwned    = engine.ErrFrontendOwned
	ErrIDSpaceExhausted = engine.ErrIDSpaceExhausted
	ErrRevNATNotFound   = engine.ErrRevNATNotFound
	ErrRevNATOwned      = engine.ErrRevNATOwned
	ErrMapFull          = maps.ErrMapFull
	// ErrMapVanished occurs at New when a family's service or backend map
	// is no longer pinned while the family's other maps hold entries that
	// refer to it (RecreateMaps accepts the loss).
	ErrMapVanished = maps.ErrVanished
	// ErrEngineRestarted occurs when the engine restarted while a call was
	// in flight more often than the call is sent again (5 times).
	ErrEngineRestarted = engine.ErrEngineRestarted
	// ErrClosed occurs when a method is called after Close.
	ErrClosed = errors.New("engine closed")
)

// DefaultCallTimeout bounds a call whose context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// DefaultReconcileInterval is how often the maps are reconciled unless
// Config.ReconcileInterval says otherwise.
const DefaultReconcileInterval = 30 * time.Second

// Config configures an Engine. The zero value is usable: pinned maps under
// /sys/fs/bpf/actorlb with 65536 entries each, restored at start.
type Config struct {
	// BPFRoot is the bpffs directory of the pinned maps (maps.DefaultRoot).
	BPFRoot string
	// MaxEntries per map family (0: maps.DefaultMaxEntries).
	MaxEntries maps.Sizes
	// RecreateMaps replaces pinned maps of another shape (entries are lost).
	RecreateMaps bool
	// MaglevTableSize is M, the entries of every service's Maglev table in
	// lb4_maglev/lb6_maglev (0: maglev.DefaultTableSize, 16381): a prime
	// from 251 to 131071 (maglev.CheckTableSize). A table takes 4×M bytes
	// of kernel memory per maglev service; the Maglev paper's rule is M >
	// 100 × backends for at most 1% imbalance. Changing it needs
	// RecreateMaps (the tables are written again at start, nothing is
	// lost).
	MaglevTableSize uint32
	// NoRestore empties the maps at start instead of restoring from them.
	NoRestore bool
	// NoRestoreHeadroom turns off the raise of the collector's heap goal
	// while New restores (by RestoreHeadroom, 64 MiB, through the
	// process's GOGC percent, put back when New returns, so that the
	// garbage collector runs fewer cycles meanwhile). There is none with
	// NoRestore, InMemory, GOGC=off, or when the process has a memory
	// limit (GOMEMLIMIT).
	NoRestoreHeadroom bool
	// NoRestoreHugePages turns off the transparent huge pages New asks
	// for the heap a restore fills (internal/hugepages: where the kernel's
	// policy is "madvise" and the heap is a new process's, New advises
	// the heap's next RestoreHeadroom bytes with MADV_HUGEPAGE, then runs
	// one collection, so that the restore's first writes fault 2 MiB at a
	// time, not 4 KiB). There are none with NoRestore, InMemory, or a
	// memory limit (GOMEMLIMIT), as for the headroom, nor when no
	// service map is pinned (nothing to restore).
	NoRestoreHugePages bool
	// NoRestoreCollect turns off the collection New runs before a
	// restore when the heap holds at least 4 MiB of objects (live and
	// garbage not yet freed), the last collection found at most 64 MiB
	// live, and the heap holds at most 256 MiB: it frees what the process
	// let go, above all an engine closed before this one, so that the
	// restore reuses pages already written instead of fresh ones, each a
	// page fault. There is
	// none with NoRestore, InMemory or GOGC=off, nor when both service
	// maps were just created (nothing to restore; no huge pages are asked
	// for then either).
	NoRestoreCollect bool
	// InMemory uses in-memory maps: no kernel, no privileges (dry run).
	InMemory bool
	// Logger receives the engine's logs (logrus.StandardLogger if nil).
	Logger *logrus.Logger
	// CallTimeout bounds calls whose context has no deadline.
	CallTimeout time.Duration
	// ReconcileInterval is how often every map is compared with what the
	// engine wrote (and its pin with the map) and repaired
	// (DefaultReconcileInterval if 0; negative: only on demand, Reconcile).
	ReconcileInterval time.Duration
	// SocketTerminator, if set, closes the connected UDP sockets that
	// reached a backend through a service once the backend stops taking
	// that service's new connections (removed, no longer active, or the
	// service deleted), so that clients such as DNS resolvers reconnect
	// and reach a live backend. It runs on a goroutine of the engine's,
	// one call at a time, with the targets queued since the last call
	// (at most 65,536 wait; more are dropped and counted). The agent sets
	// the socket-LB datapath's.
	SocketTerminator SocketTerminator

	// hooks are the test knobs (map faults, actor middleware): set here by
	// this package's tests, through enginetest.With by the module's others.
	hooks enginetest.Hooks
}

func init() {
	enginetest.Install(func(cfg any) *enginetest.Hooks {
		if c, ok := cfg.(*Config); ok {
			return &c.hooks
		}
		return nil
	})
}

// Engine is a running actorlb.
type Engine struct {
	cfg  Config
	log  *logrus.Entry
	maps *maps.LBMaps
	// mapsMu keeps Close from closing the maps while DumpMaps reads them.
	mapsMu  sync.RWMutex
	mapsOff bool
	sys     *actor.ActorSystem
	keeper  *actor.PID
	sup     *actor.PID
	gate    *gate
	stopped chan struct{}
	close   sync.Once
	closed  chan struct{}
	loops   sync.WaitGroup // the reconcile loop

	// driftMu guards the reconcile totals, kept here so that they survive
	// restarts of the supervisor.
	driftMu    sync.Mutex
	drift      map[string]map[string]uint64 // repairs by map, then kind
	reconciles uint64
	lastAt     time.Time
	lastErr    error

	sockets *socketWorker // nil without Config.SocketTerminator
	// dispatch runs the actors' mailboxes.
	dispatch *actors.Dispatcher
	// copies are the arrays of services copied for UpsertBatch and
	// SyncSource calls, given back once answered (serviceCopies).
	copies copiesPool
}

// New opens the maps, starts the actors and waits until the state is
// restored from the maps (or ctx ends).
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaglevTableSize == 0 {
		cfg.MaglevTableSize = maglev.DefaultTableSize
	}
	if err := maglev.CheckTableSize(cfg.MaglevTableSize); err != nil {
		return nil, fmt.Errorf("new engine: MaglevTableSize: %w", err)
	}
	log := logrus.NewEntry(cfg.Logger)
	// The actor system is made while the maps open: its process registry
	// is 1,024 small maps (internal/actorsys: 32,768 without it).
	sysc := make(chan *actor.ActorSystem, 1)
	go func() {
		sysc <- actorsys.New(
			actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
				return slog.New(&logrusHandler{log: log.WithField("lib", "protoactor")})
			}),
			actor.WithDeadLetterRequestLogging(false),
		)
	}()
	// The heap is readied for the restore while the maps open: each
	// takes milliseconds of a new process (prepareRestoreHeap's
	// collection starts the collector's workers), and neither needs the
	// other.
	// Whether a service map is pinned is read here, before Open: read in
	// the goroutine, it could see the map Open has just created.
	pinned := servicesPinned(cfg)
	heapc := make(chan func(), 1)
	go func() { heapc <- prepareRestoreHeap(cfg, pinned, log) }()
	lbm, err := maps.Open(maps.Config{
		Root: cfg.BPFRoot, MaxEntries: cfg.MaxEntries, Recreate: cfg.RecreateMaps, InMemory: cfg.InMemory, Fault: cfg.hooks.Fault,
		MaglevTableSize: cfg.MaglevTableSize,
	})
	sys := <-sysc // nothing to stop: it starts no goroutine
	putBack := <-heapc
	defer putBack() // the restore is done, or New failed
	if err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if cfg.hooks.Maps != nil {
		cfg.hooks.Maps(lbm)
	}
	e := &Engine{
		cfg: cfg, log: log, maps: lbm, sys: sys,
		stopped: make(chan struct{}), closed: make(chan struct{}), gate: newGate(),
	}
	var onLeft func(lb.ServiceID, []lb.L3n4Addr)
	if cfg.SocketTerminator != nil {
		e.sockets = newSocketWorker(cfg.SocketTerminator)
		onLeft = e.sockets.add
	}
	var once sync.Once
	e.dispatch = actors.NewDispatcher(len(engine.Children) + 2) // the keeper, the supervisor and its children
	props := actors.NewKeeperProps(actors.Config{
		Dispatcher:     e.dispatch,
		OnBackendsLeft: onLeft,
		Maps:           lbm, Log: e.log, Restore: !cfg.NoRestore, ChildMiddleware: cfg.hooks.ChildMiddleware,
		NoIDLease:       cfg.hooks.NoIDLease,
		QuietAfter:      cfg.hooks.QuietAfter,
		OnStopped:       func() { once.Do(func() { close(e.stopped) }) },
		OnUp:            e.gate.setUp,
		OnDown:          e.gate.setDown,
		OnRestoreFailed: e.gate.fail,
	}, cfg.hooks.SupervisorMiddleware...)
	e.keeper, err = e.sys.Root.SpawnNamed(props, actors.KeeperName)
	if err != nil {
		if e.sockets != nil {
			e.sockets.stop()
		}
		e.dispatch.Close()
		lbm.Close()
		return nil, fmt.Errorf("new engine: spawn keeper: %w", err)
	}
	e.sup = actor.NewPID(e.sys.Address(), actors.SupervisorPID)
	_, err = e.gate.wait(ctx, nil)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if every := cmp.Or(cfg.ReconcileInterval, DefaultReconcileInterval); every > 0 {
		e.loops.Add(1)
		go e.reconcileEvery(every)
	}
	return e, nil
}

// BPFRoot returns the bpffs directory the maps are pinned in ("" for
// in-memory maps).
func (e *Engine) BPFRoot() string { return e.maps.Root }

// MapEntries are the decoded entries of the six maps, in no particular
// order.
type MapEntries struct {
	Services4, Services6 []maps.ServiceEntry
	Backends4, Backends6 []maps.BackendEntry
	RevNAT4, RevNAT6     []maps.RevNATEntry
	// Members (lb_members) and AffinityMatch (lb_affinity_match) serve
	// both families.
	Members       []maps.MemberEntry
	AffinityMatch []maps.AffinityMatchKey
	// SourceRanges are the entries of lb4_source_range and
	// lb6_source_range (a key's family is its address's).
	SourceRanges []maps.SourceRangeKey
}

// DumpMaps reads every entry of the six maps, as the datapath sees them
// (the kernel's maps, not the engine's table). It reads one map after the
// other while the engine may write: an operation in flight may show in
// some maps and not yet in others.
func (e *Engine) DumpMaps(ctx context.Context) (MapEntries, error) {
	e.mapsMu.RLock()
	defer e.mapsMu.RUnlock()
	if e.mapsOff {
		return MapEntries{}, fmt.Errorf("dump maps: %w", ErrClosed)
	}
	var d MapEntries
	for _, step := range []func() error{
		func() (err error) { d.Services4, err = e.maps.Service4.Dump(); return err },
		func() (err error) { d.Backends4, err = e.maps.Backend4.Dump(); return err },
		func() (err error) { d.RevNAT4, err = e.maps.RevNAT4.Dump(); return err },
		func() (err error) { d.Services6, err = e.maps.Service6.Dump(); return err },
		func() (err error) { d.Backends6, err = e.maps.Backend6.Dump(); return err },
		func() (err error) { d.RevNAT6, err = e.maps.RevNAT6.Dump(); return err },
		func() (err error) { d.Members, err = e.maps.Members.Dump(); return err },
		func() (err error) { d.AffinityMatch, err = e.maps.AffinityMatch.Dump(); return err },
		func() (err error) {
			v4, err := e.maps.SourceRange4.Dump()
			if err != nil {
				return err
			}
			v6, err := e.maps.SourceRange6.Dump()
			d.SourceRanges = append(v4, v6...)
			return err
		},
	} {
		if err := ctx.Err(); err != nil {
			return MapEntries{}, fmt.Errorf("dump maps: %w", err)
		}
		if err := step(); err != nil {
			return MapEntries{}, fmt.Errorf("dump maps: %w", err)
		}
	}
	return d, nil
}

// Close stops the actors top-down (queued calls are served first) and
// closes the maps; they stay pinned. It is safe to call more than once.
func (e *Engine) Close() error {
	var err error
	e.close.Do(func() {
		close(e.closed)
		e.loops.Wait()
		e.sys.Root.Poison(e.keeper)
		select {
		case <-e.stopped:
		case <-time.After(10 * time.Second):
			err = errors.New("close: actors did not stop within 10s")
		}
		e.sys.Shutdown()
		e.dispatch.Close()
		if e.sockets != nil {
			e.sockets.stop()
		}
		e.mapsMu.Lock()
		e.mapsOff = true
		err = errors.Join(err, e.maps.Close())
		e.mapsMu.Unlock()
	})
	return err
}

// maxRetries bounds how often a call is sent again after the supervisor
// went down while it was in flight.
const maxRetries = 5

// callTimers are the stopped timers of calls that returned. A timer's
// channel is unbuffered (Go 1.23 on): once stopped, it delivers nothing
// stale to the call that takes it next.
var callTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// putCallTimer stops t and gives it back to callTimers.
func putCallTimer(t *time.Timer) {
	t.Stop()
	callTimers.Put(t)
}

// call sends a request with a reply channel and waits for the reply. If
// the supervisor goes down before answering, it waits until the next
// incarnation has restored and sends the request again; retried tells the
// caller that an earlier attempt may have been applied.
func call[R interface{ Error() error }](ctx context.Context, e *Engine, build func(chan<- R) any) (r R, retried bool, err error) {
	select {
	case <-e.closed:
		return r, false, ErrClosed
	default:
	}
	// A context without a deadline gets CallTimeout: a timer, not a
	// context of its own (three allocations a call fewer), from a pool
	// (two more, some 180 bytes).
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := callTimers.Get().(*time.Timer)
		t.Reset(e.cfg.CallTimeout)
		defer putCallTimer(t)
		timeout = t.C
	}
	for attempt := 0; ; attempt++ {
		down, err := e.gate.wait(ctx, timeout)
		if err != nil {
			return r, attempt > 0, err
		}
		ch := make(chan R, 1)
		msg := build(ch)
		e.sys.Root.Send(e.sup, msg)
		r, done, err := await(ctx, e, ch, down, timeout, attempt)
		if w, ok := msg.(withdrawable); ok {
			w.Withdraw() // whatever the outcome: the engine no longer reads what the message lent it
		}
		if done {
			return r, attempt > 0, err
		}
	}
}

// withdrawable is a call whose sender lends the engine what it carries
// until it withdraws the call (messages.Upsert).
type withdrawable interface{ Withdraw() bool }

// await waits for the answer to one attempt of a call: done is false when
// the call is to be sent again (the engine restarted), r and err are the
// outcome otherwise.
func await[R interface{ Error() error }](ctx context.Context, e *Engine, ch <-chan R, down <-chan struct{}, timeout <-chan time.Time, attempt int) (r R, done bool, err error) {
	select {
	case r = <-ch:
		return r, !errors.Is(r.Error(), engine.ErrEngineRestarted) || attempt == maxRetries, nil
	case <-down:
		if attempt == maxRetries {
			return r, true, engine.ErrEngineRestarted
		}
		return r, false, nil
	case <-e.closed:
		return r, true, ErrClosed
	case <-ctx.Done():
		return r, true, ctx.Err()
	case <-timeout:
		return r, true, context.DeadlineExceeded
	}
}

// Upsert creates or updates the service of svc's frontend. A zero
// Frontend.ID allocates one. It returns the service ID and whether the
// service was created. The engine copies svc when it takes the call and
// keeps nothing of it: svc is the caller's again once Upsert returns,
// whatever the outcome. A call whose ctx ends before the engine took it
// is not done at all; one taken goes on, and may be applied, though
// Upsert returned ctx's error.
func (e *Engine) Upsert(ctx context.Context, svc *lb.Service) (lb.ServiceID, bool, error) {
	if svc == nil {
		return 0, false, fmt.Errorf("upsert service: %w", (&lb.Service{}).Validate())
	}
	// svc itself, not a copy: the engine copies it when it takes the call,
	// and call withdraws the call before it returns (messages.Upsert).
	r, _, err := call(ctx, e, func(ch chan<- messages.UpsertReply) any { return &messages.Upsert{Service: svc, Reply: ch} })
	if err != nil {
		return 0, false, fmt.Errorf("upsert service %s: %w", svc.Frontend.L3n4Addr, err)
	}
	return r.ID, r.Created, r.Err
}

// UpsertResult is the outcome of one service of UpsertBatch.
type UpsertResult struct {
	ID      lb.ServiceID
	Created bool
	Err     error
}

// UpsertBatch upserts every service of svcs, each as Upsert would, and
// returns one result per service, in order. The services enter the engine
// together, in order, so their map writes share batched system calls: for
// many services this is much faster than one Upsert each. Runs of
// services, new or updated (no frontend or backend taken in common), go
// as one operation: an invalid service or an ID the allocator refuses
// fails alone, but a map
// that refuses the writes fails every service of that operation and
// leaves the maps as they were for them. While single-service calls are
// being made (one within the last second), a run is cut into chunks of
// 8 services, each its own operation, so that those calls do not wait
// behind the whole batch: a refused write then fails the services of its
// chunk only. The error is for the call as a whole (closed engine,
// context done).
func (e *Engine) UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]UpsertResult, error) {
	cp := e.copies.take(svcs)
	r, retried, err := call(ctx, e, func(ch chan<- messages.UpsertBatchReply) any {
		return &messages.UpsertBatch{Services: cp.services, Reply: ch}
	})
	if err != nil {
		return nil, fmt.Errorf("upsert batch of %d services: %w", len(svcs), err)
	}
	if !retried {
		e.copies.release(cp)
	}
	out := make([]UpsertResult, len(r.Results))
	for i, x := range r.Results {
		out[i] = UpsertResult{ID: x.ID, Created: x.Created, Err: x.Err}
	}
	return out, nil
}

// serviceCopies are deep copies of a call's services (a nil service
// becomes an empty one, which fails validation with a clear error) for
// the engine to own: the services in one array, their backends in another
// and their source ranges in a third, where a copy each
// (lb.Service.DeepCopy) took two allocations per service, 200 for a batch
// of 100. Each copy's slices are capped at their length, so that nothing
// appended to one reaches the next.
//
// The engine keeps nothing of a service past its call (its table stores
// its own form), so the arrays are the engine's until the call is
// answered, and the façade's again once it is: copiesPool.release gives
// them to the next call, after a call answered on its first attempt. A
// call sent again (the supervisor restarted) or given up (its context
// ended, the engine closed) leaves them to the collector: a copy of its
// message may still be read (a request the old supervisor sent the
// allocator names the services' backends; a call not yet taken). The
// copies were a third of what an UpsertBatch allocated
// (docs/performance-history.md, session 52).
type serviceCopies struct {
	services []*lb.Service // what the call sends: &specs[i]
	specs    []lb.Service
	bes      []lb.Backend
	rs       []netip.Prefix
}

// copiesPool holds the serviceCopies calls gave back, in a sync.Pool (the
// collector frees what it holds when unused). Safe for concurrent use.
type copiesPool struct {
	pool     sync.Pool
	released atomic.Int64 // calls of release (arrays kept or, past the kept sizes, dropped), for tests
}

// The largest arrays given-back copies keep: one UpsertBatch of a
// thousand services of ten backends fits; a larger call's arrays are left
// to the collector.
const (
	copiesKeptServices = 4096
	copiesKeptBackends = 16384
	copiesKeptRanges   = 4096
)

// take returns copies of svcs, in arrays a call gave back when they have
// room.
func (p *copiesPool) take(svcs []*lb.Service) *serviceCopies {
	nb, nr := 0, 0
	for _, s := range svcs {
		if s != nil {
			nb += len(s.Backends)
			nr += len(s.SourceRanges)
		}
	}
	c, _ := p.pool.Get().(*serviceCopies)
	if c == nil {
		c = new(serviceCopies)
	}
	c.services = sized(c.services, len(svcs))
	c.specs = sized(c.specs, len(svcs))
	bes, rs := sized(c.bes, nb), sized(c.rs, nr)
	c.bes, c.rs = bes, rs
	for i, s := range svcs {
		d := &c.specs[i]
		c.services[i] = d
		if s == nil {
			*d = lb.Service{}
			continue
		}
		*d = *s
		if s.Backends != nil {
			n := copy(bes, s.Backends)
			d.Backends, bes = bes[:n:n], bes[n:]
		}
		if s.SourceRanges != nil {
			n := copy(rs, s.SourceRanges)
			d.SourceRanges, rs = rs[:n:n], rs[n:]
		}
	}
	return c
}

// sized returns s with length n, in its array when it has room.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// release gives c's arrays to the next call: only copies whose call was
// answered on its first attempt (serviceCopies); c is not used after.
// Arrays past the copiesKept sizes are dropped. Nothing is cleared: what
// a copy refers to is in the arrays themselves (its backends and source
// ranges, the only fields of a service that refer to memory), so the
// arrays keep nothing of the caller's alive.
func (p *copiesPool) release(c *serviceCopies) {
	p.released.Add(1)
	if cap(c.specs) > copiesKeptServices || cap(c.bes) > copiesKeptBackends || cap(c.rs) > copiesKeptRanges {
		return
	}
	c.services, c.specs, c.bes, c.rs = c.services[:0], c.specs[:0], c.bes[:0], c.rs[:0]
	p.pool.Put(c)
}

// DeleteResult is the outcome of one frontend of DeleteBatch.
type DeleteResult struct {
	ID  lb.ServiceID
	Err error
}

// DeleteBatch deletes the services of frontends, each as DeleteByFrontend
// would, in order, with one result per frontend. Distinct frontends are
// deleted as one operation (one request per actor and step for all of
// them; in chunks of 8 while single-service calls are being made, as for
// UpsertBatch), so a map that refuses the writes fails every frontend of
// that operation and leaves their services in place; a frontend without a service fails
// alone (ErrServiceNotFound), and so does one whose service another
// source owns (ErrFrontendOwned): the writer is lb.SourceAPI. The error is
// for the call as a whole.
func (e *Engine) DeleteBatch(ctx context.Context, frontends []lb.L3n4Addr) ([]DeleteResult, error) {
	return e.DeleteBatchAs(ctx, lb.SourceAPI, frontends)
}

// DeleteBatchAs is DeleteBatch written by src: only services of src are
// deleted, the others fail alone with ErrFrontendOwned.
func (e *Engine) DeleteBatchAs(ctx context.Context, src lb.Source, frontends []lb.L3n4Addr) ([]DeleteResult, error) {
	if !src.IsValid() {
		return nil, fmt.Errorf("delete batch: %w", &lb.ValidationError{Field: "source", Value: src.String(), Reason: "unknown source"})
	}
	cp := slices.Clone(frontends)
	r, retried, err := call(ctx, e, func(ch chan<- messages.DeleteBatchReply) any {
		return &messages.DeleteBatch{Frontends: cp, As: src, Reply: ch}
	})
	if err != nil {
		return nil, fmt.Errorf("delete batch of %d services: %w", len(frontends), err)
	}
	out := make([]DeleteResult, len(r.Results))
	for i, x := range r.Results {
		if retried && errors.Is(x.Err, ErrServiceNotFound) {
			x.Err = nil // an earlier attempt deleted it
		}
		out[i] = DeleteResult{ID: x.ID, Err: x.Err}
	}
	return out, nil
}

// Delete deletes the service with id; a service of another source than
// lb.SourceAPI is left alone (ErrFrontendOwned). It first reads the
// service's frontend and deletes the service with id only while it still
// has that frontend: an ID freed by the delete can go to another service
// at once after an engine restart, and a delete sent again after that
// restart must not delete the newcomer.
func (e *Engine) Delete(ctx context.Context, id lb.ServiceID) error {
	svc, err := e.Get(ctx, id)
	if errors.Is(err, ErrServiceNotFound) {
		return fmt.Errorf("delete service %d: %w", id, ErrServiceNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete service %d: %w", id, err)
	}
	fe := svc.Frontend.L3n4Addr
	r, retried, err := call(ctx, e, func(ch chan<- messages.DeleteReply) any {
		return &messages.Delete{ID: id, Frontend: fe, Reply: ch}
	})
	if err != nil {
		return fmt.Errorf("delete service %d: %w", id, err)
	}
	if retried && errors.Is(r.Err, ErrServiceNotFound) {
		return nil // an earlier attempt deleted it
	}
	return r.Err
}

// DeleteByFrontend deletes the service of fe and returns its ID; a
// service of another source than lb.SourceAPI is left alone
// (ErrFrontendOwned).
func (e *Engine) DeleteByFrontend(ctx context.Context, fe lb.L3n4Addr) (lb.ServiceID, error) {
	r, retried, err := call(ctx, e, func(ch chan<- messages.DeleteReply) any { return &messages.DeleteByFrontend{Frontend: fe, Reply: ch} })
	if err != nil {
		return 0, fmt.Errorf("delete service %s: %w", fe, err)
	}
	if retried && errors.Is(r.Err, ErrServiceNotFound) {
		return 0, nil // an earlier attempt deleted it
	}
	return r.ID, r.Err
}

// Get returns the service with id (backends in slot order).
func (e *Engine) Get(ctx context.Context, id lb.ServiceID) (*lb.Service, error) {
	r, _, err := call(ctx, e, func(ch chan<- messages.GetReply) any { return &messages.Get{ID: id, Reply: ch} })
	if err != nil {
		return nil, fmt.Errorf("get service %d: %w", id, err)
	}
	return r.Service, r.Err
}

// List returns every service sorted by ID, backends in slot order.
func (e *Engine) List(ctx context.Context) ([]*lb.Service, error) {
	r, _, err := call(ctx, e, func(ch chan<- messages.ListReply) any { return &messages.List{Reply: ch} })
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	return r.Services, r.Err
}

// SyncResult counts what a Sync changed and lists the desired services
// that failed.
type SyncResult struct {
	Upserted int
	Deleted  int
	// Failed lists the desired services that failed, in the order given
	// (a frontend another source owns fails with ErrFrontendOwned).
	Failed []SyncFailure
}

// SyncFailure is one desired service of a Sync that failed.
type SyncFailure struct {
	Frontend lb.L3n4Addr
	Err      error
}

// Sync is SyncSource for lb.SourceAPI: the maps' API services become
// desired, and standalone revNAT entries are deleted.
func (e *Engine) Sync(ctx context.Context, desired []*lb.Service) (SyncResult, error) {
	return e.SyncSource(ctx, lb.SourceAPI, desired)
}

// SyncSource makes src's services equal desired: it upserts every service
// in it and deletes every other service of src (and, for lb.SourceAPI,
// every standalone revNAT entry), as one step with respect to other calls.
// Services of other sources are never touched. New services are created
// in runs, as UpsertBatch creates them (in chunks while single-service
// calls are being made: a map that refuses the writes fails that chunk's
// services). Every desired service must
// have Source src; invalid input changes nothing. The error joins those of
// the services that failed (also in SyncResult.Failed) and of failed
// deletes.
func (e *Engine) SyncSource(ctx context.Context, src lb.Source, desired []*lb.Service) (SyncResult, error) {
	if !src.IsValid() {
		return SyncResult{}, fmt.Errorf("sync: %w", &lb.ValidationError{Field: "source", Value: src.String(), Reason: "unknown source"})
	}
	for i, s := range desired {
		if s == nil {
			return SyncResult{}, fmt.Errorf("sync: service %d is nil", i)
		}
	}
	cp := e.copies.take(desired)
	r, retried, err := call(ctx, e, func(ch chan<- messages.SyncReply) any {
		return &messages.Sync{Source: src, Desired: cp.services, Reply: ch}
	})
	if err != nil {
		return SyncResult{}, fmt.Errorf("sync: %w", err)
	}
	if !retried {
		e.copies.release(cp)
	}
	res := SyncResult{Upserted: r.Upserted, Deleted: r.Deleted}
	for _, f := range r.Failed {
		res.Failed = append(res.Failed, SyncFailure{Frontend: f.Frontend, Err: f.Err})
	}
	return res, r.Err
}

// RevNAT is one reverse-NAT entry.
type RevNAT struct {
	ID      lb.ServiceID
	Address lb.L3n4Addr // address and port; protocol and scope unused
	// Service is true when the entry belongs to a service (it is created
	// and removed with it) rather than added on its own.
	Service bool
}

func (e *Engine) revNAT(ctx context.Context, what string, build func(chan<- messages.RevNATReply) any) ([]RevNAT, error) {
	r, retried, err := call(ctx, e, build)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if retried && what == "delete revNAT" && errors.Is(r.Err, ErrRevNATNotFound) {
		return nil, nil // an earlier attempt deleted it
	}
	if r.Err != nil {
		return nil, r.Err
	}
	out := make([]RevNAT, len(r.Entries))
	for i, x := range r.Entries {
		out[i] = RevNAT{ID: x.ID, Address: x.Address, Service: x.Service}
	}
	return out, nil
}

// RevNATAdd adds a standalone revNAT entry (service entries come with
// their services).
func (e *Engine) RevNATAdd(ctx context.Context, id lb.ServiceID, addr lb.L3n4Addr) error {
	_, err := e.revNAT(ctx, "add revNAT", func(ch chan<- messages.RevNATReply) any {
		return &messages.RevNATAdd{Entry: messages.RevNAT{ID: id, Address: addr}, Reply: ch}
	})
	return err
}

// RevNATDelete deletes a standalone revNAT entry.
func (e *Engine) RevNATDelete(ctx context.Context, id lb.ServiceID) error {
	_, err := e.revNAT(ctx, "delete revNAT", func(ch chan<- messages.RevNATReply) any {
		return &messages.RevNATDelete{ID: id, Reply: ch}
	})
	return err
}

// RevNATDeleteAll deletes every standalone revNAT entry.
func (e *Engine) RevNATDeleteAll(ctx context.Context) error {
	_, err := e.revNAT(ctx, "delete all revNAT", func(ch chan<- messages.RevNATReply) any {
		return &messages.RevNATDeleteAll{Reply: ch}
	})
	return err
}

// RevNATGet returns the revNAT entry of id.
func (e *Engine) RevNATGet(ctx context.Context, id lb.ServiceID) (RevNAT, error) {
	es, err := e.revNAT(ctx, "get revNAT", func(ch chan<- messages.RevNATReply) any {
		return &messages.RevNATGet{ID: id, Reply: ch}
	})
	if err != nil {
		return RevNAT{}, err
	}
	return es[0], nil
}

// RevNATDump returns every revNAT entry sorted by ID.
func (e *Engine) RevNATDump(ctx context.Context) ([]RevNAT, error) {
	return e.revNAT(ctx, "dump revNAT", func(ch chan<- messages.RevNATReply) any {
		return &messages.RevNATDump{Reply: ch}
	})
}

// MapStats are the figures of one map.
type MapStats struct {
	Name       string
	MaxEntries int
	// Entries the map holds, as its owner counts them (no map is read to
	// answer Stats).
	Entries int
	// Updated counts the entries written through the map since the engine
	// started (a failed write may have written a prefix), Deleted the
	// keys deleted.
	Updated uint64
	Deleted uint64
	// Pin is what the map's pin names now: "ok", "missing" or "replaced"
	// (removed or replaced under the engine: the next reconcile re-pins
	// it), "unpinned" for in-memory maps.
	Pin string
}

// PinOK reports whether the map's pin names the map (or it has none).
func (m MapStats) PinOK() bool { return m.Pin == "ok" || m.Pin == "unpinned" }

// Fill is Entries divided by MaxEntries (0 for a map without capacity).
func (m MapStats) Fill() float64 {
	if m.MaxEntries <= 0 {
		return 0
	}
	return float64(m.Entries) / float64(m.MaxEntries)
}

// StepTiming counts the runs of one step of the engine's operations and
// their total duration (retries included).
type StepTiming struct {
	Count uint64
	Total time.Duration
}

// RestoreStats describe the last restore from the pinned maps.
type RestoreStats struct {
	Services     int
	Backends     int
	OrphanRevNAT int // standalone revNAT entries found (and deleted)
	Repairs      int
	// RepairsByKind counts the repairs by kind ("orphan-revnat", ...).
	RepairsByKind map[string]int
	Writes        int // map entries written or deleted to repair
}

// Stats are the engine's figures.
type Stats struct {
	// Services and Backends in the engine's table (a backend counts once
	// however many services use it), RevNAT entries (of services and
	// standalone).
	Services int
	Backends int
	RevNAT   int
	// Ready is true when the engine has restored and serves.
	Ready bool
	// ActorRestarts counts restarts by actor (names of ActorNames); an
	// actor that never restarted may be absent.
	ActorRestarts map[string]int
	// Restore describes the last restore.
	Restore RestoreStats
	// OpsInFlight counts the operations started and not finished.
	OpsInFlight int
	// RequestsResent counts the requests sent again to a restarted actor.
	RequestsResent int
	// RequestsSent counts the requests the engine sent its actors,
	// ChildMessages the messages that carried them (several requests go in
	// one message): their ratio is the average batch.
	RequestsSent  uint64
	ChildMessages uint64
	// Steps is the time operations spent in each step, by step name ("wait
	// in queue": behind other operations on the same frontend or backend),
	// since the engine last (re)started.
	Steps map[string]StepTiming
	// Maps are the figures of every map, in the order of maps.Names (a
	// Maglev map counts tables: entries, written and deleted).
	Maps []MapStats
	// DriftRepairs counts what reconciles repaired since the engine was
	// created, by map name, then kind ("missing", "changed", "extra",
	// "pin").
	DriftRepairs map[string]map[string]uint64
	// Reconciles counts the reconciles that ended (failed ones too);
	// LastReconcile is when the last one ended (zero before one),
	// LastReconcileError its failure.
	Reconciles         uint64
	LastReconcile      time.Time
	LastReconcileError error
	// SocketsTerminated counts the connected UDP sockets the
	// SocketTerminator closed; SocketTargetsDropped the targets dropped
	// because too many waited; SocketTerminateFailures its failed calls,
	// LastSocketTerminateError the last failure.
	SocketsTerminated        uint64
	SocketTargetsDropped     uint64
	SocketTerminateFailures  uint64
	LastSocketTerminateError error
}

// MapWrites is the total of entries written and deleted in every map.
func (s Stats) MapWrites() uint64 {
	var n uint64
	for _, m := range s.Maps {
		n += m.Updated + m.Deleted
	}
	return n
}

// Stats returns counts of services and backends, entries and writes by
// map, actor restarts and the figures of the last restore. It reads no
// map: the entry counts are those the maps' owners keep.
func (e *Engine) Stats(ctx context.Context) (Stats, error) {
	r, _, err := call(ctx, e, func(ch chan<- messages.StatsReply) any { return &messages.Stats{Reply: ch} })
	if err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	st := statsOf(r)
	for _, m := range []interface {
		Name() string
		MaxEntries() int
		Entries() int
		Counters() maps.Counters
		CheckPin() (maps.PinState, error)
	}{e.maps.Service4, e.maps.Backend4, e.maps.RevNAT4, e.maps.Service6, e.maps.Backend6, e.maps.RevNAT6, e.maps.Members, e.maps.AffinityMatch, e.maps.Maglev4, e.maps.Maglev6, e.maps.SourceRange4, e.maps.SourceRange6} {
		c := m.Counters()
		ms := MapStats{Name: m.Name(), MaxEntries: m.MaxEntries(), Entries: m.Entries(), Updated: c.Updated, Deleted: c.Deleted}
		// Microseconds (the pin is opened and its map ID compared): a pin
		// removed or replaced under the agent shows at once, not at the
		// next reconcile.
		pin, err := m.CheckPin()
		ms.Pin = pin.String()
		if err != nil {
			ms.Pin = "error: " + err.Error()
		}
		st.Maps = append(st.Maps, ms)
	}
	e.driftMu.Lock()
	st.DriftRepairs = make(map[string]map[string]uint64, len(e.drift))
	for m, kinds := range e.drift {
		cp := make(map[string]uint64, len(kinds))
		for k, n := range kinds {
			cp[k] = n
		}
		st.DriftRepairs[m] = cp
	}
	st.Reconciles, st.LastReconcile, st.LastReconcileError = e.reconciles, e.lastAt, e.lastErr
	e.driftMu.Unlock()
	if e.sockets != nil {
		st.SocketsTerminated, st.SocketTargetsDropped, st.SocketTerminateFailures, st.LastSocketTerminateError = e.sockets.stats()
	}
	return st, nil
}

// cloneCounts copies m (nil stays nil).
func cloneCounts(m map[string]int) map[string]int {
	if m == nil {
		return nil
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// statsOf converts the supervisor's answer into the façade's figures
// (maps copied: the caller owns them).
func statsOf(r messages.StatsReply) Stats {
	st := Stats{
		Services: r.Services, Backends: r.Backends, RevNAT: r.RevNAT, Ready: r.Ready,
		ActorRestarts: cloneCounts(r.ActorRestarts),
		Restore: RestoreStats{
			Services: r.Restore.Services, Backends: r.Restore.Backends, OrphanRevNAT: r.Restore.OrphanRevNAT,
			Repairs: r.Restore.Repairs, RepairsByKind: cloneCounts(r.Restore.RepairsByKind), Writes: r.Restore.Writes,
		},
		OpsInFlight: r.OpsInFlight, RequestsResent: r.RequestsResent,
		RequestsSent: r.RequestsSent, ChildMessages: r.ChildMessages,
	}
	if r.Steps != nil {
		st.Steps = make(map[string]StepTiming, len(r.Steps))
		for name, t := range r.Steps {
			st.Steps[name] = StepTiming{Count: t.Count, Total: t.Total}
		}
	}
	return st
}

// ActorNames lists the engine's actors, the names StopActor takes and
// Stats.ActorRestarts counts by: the supervisor, the ID allocator, the
// service and backend map owners per family, the revNAT maps' owner,
// the owners of lb_members and lb_affinity_match, the Maglev maps' owner and
// the source-range maps' owner.
var ActorNames = []string{"supervisor", "alloc", "svc4", "svc6", "be4", "be6", "revnat", "members", "affinity", "maglev", "srcrange"}

// StopActor stops one actor of the engine outright, as a crash would
// (chaos testing and drills): its parent spawns it again, it rebuilds its
// state from the maps, and requests it owed are sent again. name is one of
// ActorNames.
func (e *Engine) StopActor(name string) error {
	id := ""
	switch {
	case name == actors.SupervisorName:
		id = actors.SupervisorPID
	default:
		for _, c := range engine.Children {
			if c == name {
				id = actors.SupervisorPID + "/" + c
			}
		}
	}
	if id == "" {
		return fmt.Errorf("stop actor: unknown actor %q (want one of %v)", name, ActorNames)
	}
	e.sys.Root.Stop(actor.NewPID(e.sys.Address(), id))
	return nil
}
