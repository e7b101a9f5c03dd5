package messages

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/actorlb/actorlb/internal/maglev"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// ---- Engine (supervisor) operations, sent from the edge with a reply channel.
// Reply channels are buffered (capacity 1): the supervisor never blocks on them.
// The services these messages carry are the supervisor's once sent: it
// puts their backends in slot order in place, so a sender sends copies of
// services it keeps (the façade does). Upsert is the exception: see there.

// Upsert creates or updates a service. Service.Frontend.ID 0 means allocate.
//
// Service stays the sender's: the supervisor takes the call (Take)
// before it reads the service, copies what it needs, releases it
// (Release) and never reads it again. A sender that stops waiting for the
// reply (its context ended) withdraws the call (Withdraw): taken already,
// Withdraw waits for the release (a copy: short); not taken yet, it never
// will be (the supervisor answers it unread). Either way the sender may
// change the service once Withdraw returned, so the façade sends the
// caller's service itself, not a copy.
type Upsert struct {
	Service *lb.Service
	Reply   chan<- UpsertReply
	state   atomic.Uint32 // upsertSent, then upsertTaken and upsertReleased, or upsertWithdrawn
}

// The states of an Upsert.
const (
	upsertSent = iota
	upsertTaken
	upsertReleased
	upsertWithdrawn
)

// Take reports whether the receiver may read m.Service, until it calls
// Release: true once, for the first Take of a call not withdrawn.
func (m *Upsert) Take() bool { return m.state.CompareAndSwap(upsertSent, upsertTaken) }

// Release ends the receiver's reading of m.Service, which Take began. The
// receiver releases within the step that took the call: nothing between
// the two may fail (a sender's Withdraw waits for it).
func (m *Upsert) Release() { m.state.Store(upsertReleased) }

// Withdraw ends the sender's lending of m.Service: from its return no one
// reads it. It waits for a receiver reading it to release it. It reports
// whether the call was withdrawn before it was taken (then nothing of it
// is done).
func (m *Upsert) Withdraw() bool {
	for {
		switch m.state.Load() {
		case upsertSent:
			if m.state.CompareAndSwap(upsertSent, upsertWithdrawn) {
				return true
			}
		case upsertTaken:
			runtime.Gosched() // the receiver copies the service: it releases it soon
		default:
			return false
		}
	}
}

// UpsertReply answers Upsert.
type UpsertReply struct {
	ID      lb.ServiceID
	Created bool
	Err     error
}

// Delete removes the service with ID.
type Delete struct {
	ID lb.ServiceID
	// Frontend, if set, is the frontend the service with ID had when the
	// caller resolved it: a service with ID and another frontend is not
	// deleted (ErrServiceNotFound). The façade sets it, so that a call
	// sent again after a supervisor restart cannot delete a service that
	// took the freed ID meanwhile.
	Frontend lb.L3n4Addr
	// As is the writer: a service of another source is not deleted
	// (ErrFrontendOwned). Zero is SourceAPI.
	As    lb.Source
	Reply chan<- DeleteReply
}

// DeleteByFrontend removes the service with this frontend.
type DeleteByFrontend struct {
	Frontend lb.L3n4Addr
	As       lb.Source // the writer, as in Delete
	Reply    chan<- DeleteReply
}

// DeleteReply answers Delete and DeleteByFrontend.
type DeleteReply struct {
	ID  lb.ServiceID
	Err error
}

// UpsertBatch upserts many services: each is its own operation, answered
// on its own, and they enter the engine in order, as one call each would
// (but in one message, so their map writes share batches).
type UpsertBatch struct {
	Services []*lb.Service
	Reply    chan<- UpsertBatchReply
}

// UpsertBatchReply answers UpsertBatch; Results[i] answers Services[i].
type UpsertBatchReply struct {
	Results []UpsertReply
}

// DeleteBatch deletes the services of many frontends, like UpsertBatch.
type DeleteBatch struct {
	Frontends []lb.L3n4Addr
	As        lb.Source // the writer, as in Delete
	Reply     chan<- DeleteBatchReply
}

// DeleteBatchReply answers DeleteBatch; Results[i] answers Frontends[i].
type DeleteBatchReply struct {
	Results []DeleteReply
}

// Get asks for one service.
type Get struct {
	ID    lb.ServiceID
	Reply chan<- GetReply
}

// GetReply answers Get; Service is a copy owned by the receiver.
type GetReply struct {
	Service *lb.Service
	Err     error
}

// List asks for every service, sorted by ID.
type List struct {
	Reply chan<- ListReply
}

// ListReply answers List; the services are copies owned by the receiver.
type ListReply struct {
	Services []*lb.Service
	Err      error
}

// Sync makes the maps equal Desired: every service in it is upserted, every
// other service and standalone revNAT entry deleted, in one step with
// respect to other calls.
type Sync struct {
	// Source is whose services are synced: every desired service has
	// it, and only services of this source are deleted.
	Source  lb.Source
	Desired []*lb.Service
	Reply   chan<- SyncReply
}

// SyncReply answers Sync.
type SyncReply struct {
	Upserted int
	Deleted  int
	// Failed lists the desired services that failed, in the order of
	// Desired; Err joins their errors and those of failed deletes.
	Failed []SyncFailure
	Err    error
}

// SyncFailure is one desired service of a Sync that failed.
type SyncFailure struct {
	Frontend lb.L3n4Addr
	Err      error
}

// RevNAT is one reverse-NAT entry as users see it.
type RevNAT struct {
	ID      lb.ServiceID
	Address lb.L3n4Addr // address and port; protocol and scope unused
	// Service is true when the entry belongs to a service (it is created
	// and removed with it) rather than added on its own.
	Service bool
}

// RevNATAdd adds a standalone revNAT entry.
type RevNATAdd struct {
	Entry RevNAT
	Reply chan<- RevNATReply
}

// RevNATDelete deletes a standalone revNAT entry.
type RevNATDelete struct {
	ID    lb.ServiceID
	Reply chan<- RevNATReply
}

// RevNATDeleteAll deletes every standalone revNAT entry (the entries of
// services stay: they go with their service).
type RevNATDeleteAll struct {
	Reply chan<- RevNATReply
}

// RevNATGet asks for the entry of one ID.
type RevNATGet struct {
	ID    lb.ServiceID
	Reply chan<- RevNATReply
}

// RevNATDump asks for every revNAT entry, sorted by ID.
type RevNATDump struct {
	Reply chan<- RevNATReply
}

// RevNATReply answers the RevNAT* requests.
type RevNATReply struct {
	Entries []RevNAT
	Err     error
}

// Stats asks for the engine's counters.
type Stats struct {
	Reply chan<- StatsReply
}

// Reconcile asks the engine to compare every map with what its owner has
// written (and its pin with the map) and to repair what differs.
type Reconcile struct {
	Reply chan<- ReconcileReply
}

// ReconcileReply answers Reconcile: one Drift per map, in the order of
// maps.Names.
type ReconcileReply struct {
	Maps []Drift
	Err  error
}

// Drift is what one map owner found different between its map and what it
// wrote, and repaired: entries missing from the map, holding another
// value, or there without having been written (extra), and the pin's
// state before the repair (maps.PinMissing or PinReplaced: re-pinned).
type Drift struct {
	Map                     string
	Pin                     maps.PinState
	Missing, Changed, Extra int
	Err                     error // the check or the repair failed (what was counted was repaired)
}

// Repairs is the number of entries and pins repaired.
func (d Drift) Repairs() int {
	n := d.Missing + d.Changed + d.Extra
	if d.Pin == maps.PinMissing || d.Pin == maps.PinReplaced {
		n++
	}
	return n
}

// StatsReply answers Stats.
type StatsReply struct {
	Services       int
	Backends       int
	RevNAT         int
	ActorRestarts  map[string]int
	Restore        RestoreStats
	Ready          bool
	OpsInFlight    int
	RequestsResent int
	// RequestsSent counts the requests the supervisor sent its children,
	// ChildMessages the messages that carried them (several requests go in
	// one Batch): their ratio is the average batch.
	RequestsSent  uint64
	ChildMessages uint64
	// Steps is the time operations spent in each step, by step name ("wait
	// in queue": behind other ops on the same frontend or backend), since
	// the engine started (the last incarnation of the supervisor).
	Steps map[string]StepTiming
	// SpareEntries is the room, in entries, of the write arrays the core
	// keeps for reuse (internal/engine/spares.go), summed over their kinds.
	SpareEntries int
}

// StepTiming counts the runs of one step of the engine's operations and
// their total duration (retries included).
type StepTiming struct {
	Count uint64
	Total time.Duration
}

// RestoreStats describes the last restore from the pinned maps.
type RestoreStats struct {
	Services      int
	Backends      int
	OrphanRevNAT  int
	Repairs       int
	RepairsByKind map[string]int
	Writes        int // map entries written or deleted to repair
}

// ---- Envelopes: several requests, or several replies, in one message.

// Batch carries the requests the supervisor has for one child when it
// flushes its outbox (all those queued while it handled the messages in
// its mailbox). The child handles them in order, exactly as if they had
// come one by one, and may answer several at once with Replies. A single
// request is sent bare.
type Batch struct {
	Msgs []any
}

// Replies carries several replies to one actor in one message; the
// receiver handles them in order, as if they had come one by one.
type Replies struct {
	Msgs []any
}

// ---- Supervisor -> map owners. Every request carries a ReqID the reply echoes.

// MapApply writes then deletes entries of one map, in the given order.
// Entries equal to what the map already holds are skipped. Its slices
// are lent (see the package doc): the owner keeps none once it answered.
type MapApply[E, K any] struct {
	ReqID   uint64
	Writes  []E
	Deletes []K
}

// MapApplied answers MapApply and RevNATApply. Written and Deleted count
// the entries that reached the map for this request (0 when it was written
// in one batch with others).
type MapApplied struct {
	ReqID   uint64
	Written int
	Deleted int
	Err     error
}

// MapDump asks a map owner for its entries.
type MapDump struct {
	ReqID uint64
}

// MapDumped answers MapDump.
type MapDumped[E any] struct {
	ReqID   uint64
	Entries maps.Entries[E] // as the owner's mirror holds them: see maps.Entries
	Err     error
}

// Service and backend map requests.
type (
	ServiceApply = MapApply[maps.ServiceEntry, maps.ServiceKey]
	BackendApply = MapApply[maps.BackendEntry, uint32]
	// MemberApply writes and deletes lb_members entries.
	MemberApply = MapApply[maps.MemberEntry, maps.MemberKey]
	// AffinityMatchApply writes and deletes lb_affinity_match entries.
	AffinityMatchApply = MapApply[maps.AffinityMatchKey, maps.AffinityMatchKey]
	// SourceRangeApply writes and deletes source-range entries of both
	// families (each key's family is its address's). Its owner answers
	// MapDump with a MapDumped[maps.SourceRangeKey] of both maps.
	SourceRangeApply = MapApply[maps.SourceRangeKey, maps.SourceRangeKey]
)

// RevNATApply writes and deletes revNAT entries of both families.
// Its slices are lent, as MapApply's.
type RevNATApply struct {
	ReqID    uint64
	Writes   []maps.RevNATEntry // family from the address
	Deletes4 []uint16
	Deletes6 []uint16
}

// MaglevTable is what one service's Maglev table is built from (the table
// itself, M entries, is built by the Maglev maps' owner).
type MaglevTable struct {
	ID       lb.ServiceID
	Family   maps.Family
	Backends []maglev.Backend // not empty
}

// MaglevApply writes the Maglev tables of Writes, then deletes the tables
// of the service IDs Deletes4 and Deletes6. A table equal to what the map
// holds is not written. With Sync, every table of a service not in Writes
// is deleted too (restore: Writes are every table there should be), and
// every table is compared with the map's (none is assumed written).
type MaglevApply struct {
	ReqID    uint64
	Writes   []MaglevTable
	Deletes4 []lb.ServiceID
	Deletes6 []lb.ServiceID
	Sync     bool
}

// MaglevApplied answers MaglevApply: tables written, deleted, and the
// tables Sync found different from their services' (or of no service).
type MaglevApplied struct {
	ReqID            uint64
	Written, Deleted int
	// Repairs counts, for Sync, the tables rewritten (missing or wrong)
	// and deleted (of no maglev service).
	Repairs int
	Err     error
}

// MaglevReconcile is MapReconcile for the Maglev maps' owner: Tables are
// the core's tables (what every maglev service's table is built from).
// The owner repairs a table only from the inputs it last wrote it from,
// which Tables must match (else an operation is in flight on it).
type MaglevReconcile struct {
	ReqID  uint64
	Tables []MaglevTable
}

// RevNATDumped answers MapDump sent to the revNAT owner.
type RevNATDumped struct {
	ReqID  uint64
	V4, V6 []maps.RevNATEntry
	Err    error
}

// MapReconcile asks a map owner to compare its map(s) with what it wrote,
// and its pin(s) with the map, and to repair the difference.
type MapReconcile struct {
	ReqID uint64
}

// MapReconciled answers MapReconcile: one Drift per map the owner holds.
type MapReconciled struct {
	ReqID uint64
	Maps  []Drift
}

// ---- Supervisor -> allocator.

// AllocAcquire takes IDs for the services of Items, in one request for
// all the services of an op that ask (a batch's run asks once). Each
// item is all or nothing and fails alone: a refused item takes nothing,
// and the items after it are served as if it had not been asked. Items
// is lent (see the package doc): the allocator keeps none once it
// answered.
type AllocAcquire struct {
	ReqID uint64
	Items []AcquireItem
	// Reuse, if set, is an answer to an earlier AllocAcquire that its
	// sender has done with: the allocator takes it (sets Reuse to nil, so
	// that a copy of the request sent again does not take it too) and
	// answers in its arrays where they have the room.
	Reuse *AllocAcquired
}

// AcquireItem is one service's part of an AllocAcquire: a service ID for
// Frontend when Service is set (WantID 0 = next free), and one fresh
// backend ID per Backends entry, the backends new to the engine. The
// allocator keeps no backend key: the supervisor's backend index binds
// each backend to its ID and counts its references; the allocator keeps
// which backend IDs are in use, and reads of Backends only their number
// and the first's address (for its error). Backends is often the
// service's own backends, shared with the sender: neither changes them.
type AcquireItem struct {
	Service  bool
	Frontend lb.L3n4Addr
	WantID   lb.ServiceID
	Backends []lb.Backend
}

// AllocAcquired answers AllocAcquire; Items is parallel to the request's.
type AllocAcquired struct {
	ReqID uint64
	Items []AcquiredItem
	// IDs is the array the items' BackendIDs are parts of (for
	// AllocAcquire.Reuse).
	IDs []lb.BackendID
}

// AcquiredItem answers an AcquireItem: its service ID (when it asked for
// one) and BackendIDs parallel to its Backends, or Err and nothing taken.
type AcquiredItem struct {
	ServiceID  lb.ServiceID
	BackendIDs []lb.BackendID
	Err        error
}

// AllocRelease releases the service IDs of Frontends.
type AllocRelease struct {
	ReqID     uint64
	Frontends []lb.L3n4Addr
}

// AllocReleased answers AllocRelease.
type AllocReleased struct {
	ReqID uint64
	Err   error
}

// AllocUnhold makes IDs reusable once their map entries are gone: held
// service IDs, and backend IDs no backend is bound to any more (in use
// until then).
type AllocUnhold struct {
	ReqID      uint64
	ServiceIDs []lb.ServiceID
	BackendIDs []lb.BackendID
}

// AllocDone answers AllocUnhold and AllocRestore.
type AllocDone struct {
	ReqID uint64
	Err   error
}

// AllocBinding is one restored binding.
type AllocBinding struct {
	Key  lb.L3n4Addr
	ID   uint64
	Refs int // 0 = reserved, not claimed
}

// AllocRestore replaces the allocator's state with these service
// bindings and backend IDs in use: bound to a backend, or freed and not
// reusable yet (their entries are being deleted).
type AllocRestore struct {
	ReqID      uint64
	Services   []AllocBinding
	BackendIDs []lb.BackendID
	// Leased are the service IDs of the supervisor's lease, not yet
	// given to a frontend: held. (Its backend IDs are in BackendIDs.)
	Leased []lb.ServiceID
}

// AllocLease asks for a lease of free IDs: up to ServiceIDs service IDs
// (held for the supervisor until it claims them, AllocClaim, or gives
// them back, AllocUnhold) and BackendIDs backend IDs (in use from then,
// as AllocAcquire's are). The supervisor hands them out itself, so that a
// new service does not wait for the allocator.
type AllocLease struct {
	ReqID      uint64
	ServiceIDs int
	BackendIDs int
}

// AllocLeased answers AllocLease: fewer IDs than asked when fewer are
// free.
type AllocLeased struct {
	ReqID      uint64
	ServiceIDs []lb.ServiceID
	BackendIDs []lb.BackendID
	Err        error
}

// AllocClaim binds leased service IDs to the frontends the supervisor
// gave them to (Refs is ignored: 1). A binding the allocator holds already
// is claimed again without change. Answered by AllocDone.
type AllocClaim struct {
	ReqID    uint64
	Bindings []AllocBinding
}

// AllocReserve reserves ID for Key without claiming it (standalone revNAT
// entries); AllocDrop frees such a reservation.
type AllocReserve struct {
	ReqID uint64
	Key   lb.L3n4Addr
	ID    lb.ServiceID
}

// AllocDrop frees the unclaimed reservation of Key.
type AllocDrop struct {
	ReqID uint64
	Key   lb.L3n4Addr
}

// Error returns the reply's error; every edge reply has one.
func (r UpsertReply) Error() error { return r.Err }

// Error returns the reply's error.
func (r DeleteReply) Error() error { return r.Err }

// Error returns the reply's error.
func (r GetReply) Error() error { return r.Err }

// Error returns the reply's error.
func (r ListReply) Error() error { return r.Err }

// Error returns the reply's error.
func (r SyncReply) Error() error { return r.Err }

// Error returns the reply's error.
func (r RevNATReply) Error() error { return r.Err }

// Error joins the errors of the batch's items.
func (r UpsertBatchReply) Error() error {
	return joinFailures(r.Results, func(x UpsertReply) error { return x.Err })
}

// Error joins the errors of the batch's items.
func (r DeleteBatchReply) Error() error {
	return joinFailures(r.Results, func(x DeleteReply) error { return x.Err })
}

// joinFailures joins the errors of rs that are not nil, in order: a batch
// that went well allocates nothing.
func joinFailures[R any](rs []R, errOf func(R) error) error {
	var errs []error
	for _, x := range rs {
		if err := errOf(x); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Error returns the reconcile's failure, if any.
func (r ReconcileReply) Error() error { return r.Err }

// Answer sends r (a ReconcileReply).
func (m *Reconcile) Answer(r any) { m.Reply <- r.(ReconcileReply) }

// Failed returns the reply failing the call with err.
func (m *Reconcile) Failed(err error) any { return ReconcileReply{Err: err} }

// Error returns nil: Stats always answers.
func (r StatsReply) Error() error { return nil }

// ---- What the engine's core needs of messages, instead of type switches.

// Call is a call of the library API to the engine: it carries its own
// reply channel (buffered: answering never blocks).
type Call interface {
	// Answer sends the reply r, of the call's own reply type, to the caller.
	Answer(r any)
	// Failed returns the reply that fails the call with err.
	Failed(err error) any
}

// Request is a request of the engine to a child; the reply echoes its ID.
type Request interface{ RequestID() uint64 }

// Reply is a child's reply to the Request of the same ID.
type Reply interface{ ReplyID() uint64 }

// RequestID returns the ID the reply echoes.
func (m *MapApply[E, K]) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *RevNATApply) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *MapDump) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *MapReconcile) RequestID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *MapReconciled) ReplyID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *MaglevApply) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *MaglevReconcile) RequestID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *MaglevApplied) ReplyID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocAcquire) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocRelease) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocUnhold) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocRestore) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocReserve) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocLease) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocClaim) RequestID() uint64 { return m.ReqID }

// RequestID returns the ID the reply echoes.
func (m *AllocDrop) RequestID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *MapApplied) ReplyID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *MapDumped[E]) ReplyID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *RevNATDumped) ReplyID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *AllocAcquired) ReplyID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *AllocReleased) ReplyID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *AllocDone) ReplyID() uint64 { return m.ReqID }

// ReplyID returns the ID of the request answered.
func (m *AllocLeased) ReplyID() uint64 { return m.ReqID }

// Answer sends r (an UpsertReply).
func (m *Upsert) Answer(r any) { m.Reply <- r.(UpsertReply) }

// Failed returns the reply failing the call with err.
func (m *Upsert) Failed(err error) any { return UpsertReply{Err: err} }

// Answer sends r (a DeleteReply).
func (m *Delete) Answer(r any) { m.Reply <- r.(DeleteReply) }

// Failed returns the reply failing the call with err.
func (m *Delete) Failed(err error) any { return DeleteReply{Err: err} }

// Answer sends r (a DeleteReply).
func (m *DeleteByFrontend) Answer(r any) { m.Reply <- r.(DeleteReply) }

// Failed returns the reply failing the call with err.
func (m *DeleteByFrontend) Failed(err error) any { return DeleteReply{Err: err} }

// Answer sends r (an UpsertBatchReply).
func (m *UpsertBatch) Answer(r any) { m.Reply <- r.(UpsertBatchReply) }

// Failed returns the reply failing every service of the batch with err.
func (m *UpsertBatch) Failed(err error) any {
	r := UpsertBatchReply{Results: make([]UpsertReply, len(m.Services))}
	for i := range r.Results {
		r.Results[i].Err = err
	}
	return r
}

// Answer sends r (a DeleteBatchReply).
func (m *DeleteBatch) Answer(r any) { m.Reply <- r.(DeleteBatchReply) }

// Failed returns the reply failing every frontend of the batch with err.
func (m *DeleteBatch) Failed(err error) any {
	r := DeleteBatchReply{Results: make([]DeleteReply, len(m.Frontends))}
	for i := range r.Results {
		r.Results[i].Err = err
	}
	return r
}

// Answer sends r (a GetReply).
func (m *Get) Answer(r any) { m.Reply <- r.(GetReply) }

// Failed returns the reply failing the call with err.
func (m *Get) Failed(err error) any { return GetReply{Err: err} }

// Answer sends r (a ListReply).
func (m *List) Answer(r any) { m.Reply <- r.(ListReply) }

// Failed returns the reply failing the call with err.
func (m *List) Failed(err error) any { return ListReply{Err: err} }

// Answer sends r (a SyncReply).
func (m *Sync) Answer(r any) { m.Reply <- r.(SyncReply) }

// Failed returns the reply failing the call with err.
func (m *Sync) Failed(err error) any { return SyncReply{Err: err} }

// Answer sends r (a RevNATReply).
func (m *RevNATAdd) Answer(r any) { m.Reply <- r.(RevNATReply) }

// Failed returns the reply failing the call with err.
func (m *RevNATAdd) Failed(err error) any { return RevNATReply{Err: err} }

// Answer sends r (a RevNATReply).
func (m *RevNATDelete) Answer(r any) { m.Reply <- r.(RevNATReply) }

// Failed returns the reply failing the call with err.
func (m *RevNATDelete) Failed(err error) any { return RevNATReply{Err: err} }

// Answer sends r (a RevNATReply).
func (m *RevNATDeleteAll) Answer(r any) { m.Reply <- r.(RevNATReply) }

// Failed returns the reply failing the call with err.
func (m *RevNATDeleteAll) Failed(err error) any { return RevNATReply{Err: err} }

// Answer sends r (a RevNATReply).
func (m *RevNATGet) Answer(r any) { m.Reply <- r.(RevNATReply) }

// Failed returns the reply failing the call with err.
func (m *RevNATGet) Failed(err error) any { return RevNATReply{Err: err} }

// Answer sends r (a RevNATReply).
func (m *RevNATDump) Answer(r any) { m.Reply <- r.(RevNATReply) }

// Failed returns the reply failing the call with err.
func (m *RevNATDump) Failed(err error) any { return RevNATReply{Err: err} }

// Answer sends r (a StatsReply).
func (m *Stats) Answer(r any) { m.Reply <- r.(StatsReply) }

// Failed returns an empty StatsReply: the engine answers Stats even when
// it cannot serve (it fills the reply in itself).
func (m *Stats) Failed(error) any { return StatsReply{} }

// EachRequest calls fn on each request msg carries: those of a Batch, in
// order, or msg itself.
func EachRequest(msg any, fn func(any)) {
	if b, ok := msg.(*Batch); ok {
		for _, m := range b.Msgs {
			fn(m)
		}
		return
	}
	fn(msg)
}
