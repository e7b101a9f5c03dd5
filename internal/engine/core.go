package engine

import (
	"time"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/pagedindex"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/sirupsen/logrus"
)

// Config configures a Core.
type Config struct {
	Log *logrus.Entry
	// Restore rebuilds the table from the maps at Start; when false the
	// maps are emptied instead.
	Restore bool
	// MaxResends bounds how often a request lost in a child crash is sent
	// again (default 3).
	MaxResends int
	// Restarts counts actor restarts by name; the core adds the children it
	// is told stopped (Stats reports it). It outlives an incarnation of the
	// core, so it is the caller's.
	Restarts map[string]int
	// OnUp runs when the core has restored and serves; OnDown when it stops
	// serving; OnRestoreFailed when restore fails (the core then fails
	// every call with err).
	OnUp, OnDown    func()
	OnRestoreFailed func(err error)
	// OnBackendsLeft runs when backends stopped taking new connections of
	// a UDP (or any-protocol) service: removed from it, no longer active,
	// or the service deleted. It runs once the service map no longer
	// offers them, so that clients that reconnect reach another backend.
	// It must not block (the caller queues the work).
	OnBackendsLeft func(service lb.ServiceID, backends []lb.L3n4Addr)
	// Now is the clock of step timings (time.Now if nil).
	Now func() time.Time
	// The bulk lane (bulk.go): while a single-service call came within
	// BulkWindow, the ops of large calls (UpsertBatch, DeleteBatch, Sync)
	// begin in chunks of at most BulkChunk services, and only while
	// those in flight hold fewer than BulkChunk × BulkInFlight services;
	// the rest wait in the core. Zero means the defaults: 8, 1 and 1 s.
	BulkChunk, BulkInFlight int
	BulkWindow              time.Duration
	// The ID lease (lease.go): how many service IDs and backend IDs the
	// core keeps leased from the allocator, so that single-service calls
	// take new IDs without a round trip to it. LeaseServiceIDs 0: no lease
	// (every new ID is asked of the allocator).
	LeaseServiceIDs, LeaseBackendIDs int
}

// Core is the engine's deterministic core: the table of services, the
// queues, the operations in flight, the requests awaiting replies and the
// outbox. It does no I/O: Step feeds it an input; Answers, Ready and
// Advance hand out what to deliver. It is not safe for concurrent use.
type Core struct {
	cfg Config
	log *logrus.Entry
	now func() time.Time

	// The table.
	services   svcTable                                      // the services by ID, compact (stored.go)
	byFE       *pagedindex.Packed[lb.L3n4Addr, lb.ServiceID] // frontend -> service (packed keys in pages by address: FrontendRuns)
	users      backendIndex                                  // backend -> services using it (restored ones in an array by ID; IPv4 and learnt-prefix IPv6 keys packed)
	shared     map[addrkey.Backend][]lb.ServiceID            // users beyond the first, of shared backends
	standalone map[lb.ServiceID]lb.L3n4Addr                  // revNAT entries without a service

	queues     queueTable
	queuesPeak int // most keys queues held since it was last made
	behind     int // ops waiting behind another op, over all queues (0: each queue holds its head alone)
	reqs       pendingTable
	inflight   int // ops begun and not complete
	// The bulk lane (bulk.go): lanes of large calls with ops waiting for
	// admission, in turn; the services of bulk ops begun and not
	// complete; when the last single-service call came.
	bulkRing   []*bulkLane
	turns      uint64 // admissions from the bulk lanes
	bulkBusy   int
	admitting  bool
	lastSingle time.Time
	intake     []*intakeCall              // large calls being taken in, oldest first (intake.go)
	lease      idLease                    // IDs leased from the allocator (lease.go)
	outbox     [numChildren][]*pendingReq // by childIndex
	spares     mapSpares                  // slices of answered map writes, for the next (spares.go)
	ops        opPool                     // single calls' ops, reused (opspool.go)
	sending    []Outgoing                 // Ready's array, reused (valid until Advance)
	answers    []Answer                   // reused once every answer was taken
	taken      int                        // answers handed out by Answers
	urgent     bool                       // the outbox holds a request of a large op (Urgent)

	// Stats.
	requestsSent, childMessages uint64
	steps                       map[string]*messages.StepTiming
	resent                      int
	restore                     messages.RestoreStats

	ready    bool
	readyErr error
	deferred []messages.Call // calls that came before restore finished
	stopping bool
}

// New returns a core with an empty table; Step(Start{}) restores it.
func New(cfg Config) *Core {
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.MaxResends == 0 {
		cfg.MaxResends = 3
	}
	if cfg.Restarts == nil {
		cfg.Restarts = map[string]int{}
	}
	if cfg.OnUp == nil {
		cfg.OnUp = func() {}
	}
	if cfg.OnDown == nil {
		cfg.OnDown = func() {}
	}
	if cfg.OnBackendsLeft == nil {
		cfg.OnBackendsLeft = func(lb.ServiceID, []lb.L3n4Addr) {}
	}
	if cfg.OnRestoreFailed == nil {
		cfg.OnRestoreFailed = func(error) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BulkChunk <= 0 {
		cfg.BulkChunk = defaultBulkChunk
	}
	if cfg.BulkInFlight <= 0 {
		cfg.BulkInFlight = defaultBulkInFlight
	}
	if cfg.BulkWindow <= 0 {
		cfg.BulkWindow = defaultBulkWindow
	}
	c := &Core{
		cfg:        cfg,
		log:        cfg.Log,
		now:        cfg.Now,
		byFE:       newFrontendIndex(0),
		users:      newBackendIndex(),
		standalone: map[lb.ServiceID]lb.L3n4Addr{},
	}
	c.services.packer = c.users.packer
	return c
}

// Input is what Step takes: Start, Stop, a messages.Call, a
// messages.Reply (or messages.Replies), ChildFailed, ChildStopped, TakeIn
// or Quiet.
type Input any

// Quiet tells the core that it has been at rest for a while (its actor's
// quiet timer, armed while Resting): it trims what it keeps for reuse to
// what an engine at rest keeps (spares.go).
type Quiet struct{}

// Start begins the restore from the children's maps.
type Start struct{}

// Stop tells the core it is going away (its actor restarts or stops):
// every call in flight is answered with Err.
type Stop struct{ Err error }

// ChildFailed tells the core that a child failed while handling Failed
// (a request or a messages.Batch) and was restarted in place.
type ChildFailed struct {
	Child  string
	Failed any
}

// ChildStopped tells the core that a child stopped for good and was
// spawned again.
type ChildStopped struct{ Child string }

// Answer is a reply to a caller: deliver it with Call.Answer(Reply).
type Answer struct {
	Call  messages.Call
	Reply any
}

// Outgoing is what one child is sent: one bare request or, when there are
// several, one messages.Batch.
type Outgoing struct {
	Child string
	Msg   any
}

// Ready is the requests waiting in the outbox, by child, in the order of
// Children.
type Ready struct {
	Requests []Outgoing
}

// Step feeds the core one input.
func (c *Core) Step(in Input) {
	if c.taken == len(c.answers) && c.taken > 0 {
		// All delivered: the calls and replies are the callers' now.
		clear(c.answers)
		c.answers, c.taken = c.answers[:0], 0
		if cap(c.answers) > scratchMax {
			c.answers = nil
		}
	}
	switch m := in.(type) {
	case Start:
		c.startRestore()
	case Stop:
		c.stopping = true
		c.cfg.OnDown()
		c.abortIntake(m.Err)
		c.abortAll(m.Err)
	case Quiet:
		if c.inflight == 0 {
			c.spares.trim()
			c.ops.trimRunArrays()
		}
	case TakeIn:
		c.takeIn()
	case ChildFailed:
		c.onChildFailed(m)
	case ChildStopped:
		if !c.stopping {
			c.onChildStopped(m.Child)
		}
	case *messages.Replies:
		for _, r := range m.Msgs {
			if r, ok := r.(messages.Reply); ok {
				c.onReply(r.ReplyID(), r)
			}
		}
	case messages.Reply:
		c.onReply(m.ReplyID(), m)
	case messages.Call:
		c.handleCall(m)
	}
	c.ops.reuse() // the single calls' ops this input completed
}

// Answers returns the replies to callers produced since the last call.
// Deliver them at once: the next Step reuses the array.
func (c *Core) Answers() []Answer {
	a := c.answers[c.taken:]
	c.taken = len(c.answers)
	return a
}

// HasReady reports whether requests wait in the outbox.
func (c *Core) HasReady() bool {
	for _, ps := range &c.outbox {
		if len(ps) > 0 {
			return true
		}
	}
	return false
}

// Ready returns the requests in the outbox, per child: all those queued
// while the inputs since the last Advance were stepped. Send them, then
// call Advance (which may reuse the Ready's array).
func (c *Core) Ready() Ready {
	rd := Ready{Requests: c.sending[:0]}
	for i, child := range Children {
		ps := c.outbox[i]
		switch len(ps) {
		case 0:
			continue
		case 1:
			rd.Requests = append(rd.Requests, Outgoing{child, ps[0].msg})
		default:
			msgs := make([]any, len(ps))
			for i, p := range ps {
				msgs[i] = p.msg
			}
			rd.Requests = append(rd.Requests, Outgoing{child, &messages.Batch{Msgs: msgs}})
		}
	}
	c.sending = rd.Requests
	return rd
}

// Advance acknowledges the last Ready: its requests were sent.
func (c *Core) Advance() {
	c.urgent = false
	clear(c.sending) // the messages are the children's now
	for i, ps := range &c.outbox {
		if len(ps) == 0 {
			continue
		}
		c.requestsSent += uint64(len(ps))
		c.childMessages++
		for _, p := range ps {
			p.sent = true
		}
		// The array is kept for the next flush, emptied: requests it still
		// pointed to would keep their ops and messages from the collector.
		clear(ps)
		c.outbox[i] = ps[:0]
		if cap(ps) > scratchMax {
			c.outbox[i] = nil
		}
	}
}

// scratchMax is the largest outbox array kept between flushes.
const scratchMax = 4096

// answer queues a reply to a caller.
func (c *Core) answer(call messages.Call, reply any) {
	c.answers = append(c.answers, Answer{call, reply})
}
