// Package engine is the deterministic core of actorlb's engine: the
// operation logic that the supervisor actor (package actors) runs inside
// itself. A Core owns the table of services (by ID, kept compact:
// svcTable in stored.go, of which an op reads a service whole as a
// table.Service of its own; by frontend; the services using each
// backend; the standalone revNAT entries), the per-key queues, the
// operations in flight, the pending table of requests
// awaiting replies and the outbox of requests not yet sent. It imports no
// actor library and does no I/O: inputs go in through Step, and what to
// deliver comes out of Answers and Ready. Its one use of other
// goroutines is inside a step: restore's install fills the backend index
// (backendIndex.fill) while another goroutine stores the services, and
// waits for both before the step returns.
//
// # Glossary
//
// One name per thing (docs/architecture.md has the full glossary):
//
//   - engine: the supervisor actor together with this core.
//   - edge: the library API (package actorlb), where calls come from.
//   - call: a messages.Call from the edge; it gets exactly one answer
//     (Answer).
//   - op: one operation (op), a plan plus the state of its run.
//   - plan: what an op does, as data (plan: start, rollback, finish).
//   - step: one stage of an op (step); its requests go out together, and
//     the op moves on when all are answered. Names: the Step* constants.
//   - request / reply: a messages.Request to a child and its
//     messages.Reply, matched by request ID through the pending table.
//   - queue: the ops waiting on one frontend or one backend (qkey).
//   - outbox: the requests made and not yet sent, per child.
//   - holds: service IDs an op has taken from the allocator, or taken
//     out of the table, and not yet given back (op.svcHolds); backends an
//     upsert acquired and has not committed, held in the backend index
//     (users.held: the index binds each backend to its ID, the allocator
//     keeps only which backend IDs are in use); and the backend IDs an op
//     unbound, in use until their entries are deleted (op.freed).
//   - lease: free IDs the allocator granted the core in advance
//     (idLease, lease.go), which it gives to the services of
//     single-service calls without a round trip, and claims (AllocClaim)
//     beside their writes; the backend IDs ops free join it while it has
//     room (keepFreed).
//   - snapshot: the allocator's whole state computed from the table,
//     the backend index, the holds and the lease (allocBindings), sent
//     after an allocator crash and at the end of restore ahead of every
//     queued allocator request.
//   - spares: slices of map write requests their owners have answered,
//     and of allocator requests for IDs, which the core fills again for
//     later requests (spares.go; the slices of MapApply and RevNATApply
//     and AllocAcquire's items are lent, see package messages), and the
//     allocator's answers to those, handed back with the next ask
//     (AllocAcquire.Reuse).
//   - restore: two ops, restorePlan (dump the map owners' mirrors,
//     table.Rebuild) then repairPlan (repairs in the fix order of
//     internal/table, install the table, allocator snapshot).
//
// # Op lifecycle
//
// run puts an op in all its queues at once. When it heads every one of
// them, begin asks its plan for its steps (plan.start). advance runs the
// steps in order. Each step sends its requests through Core.request, and
// each reply is folded into the op. When the last reply of a step is in,
// settle runs the step again after a transient failure, up to the step's
// retry count; otherwise the op fails. The first failure replaces the
// remaining steps with the plan's rollback, computed from what the op
// recorded. When no step is left, complete answers the callers
// (plan.finish), and dequeue begins the ops that were waiting behind it.
// Upserts and deletes write in make-before-break order and roll back only
// before their commit step. A single call's op (Upsert, Delete,
// DeleteByFrontend: one object with its plan, item and waiter) is reused
// by a later single call once complete, taken back when the input that
// completed it has been stepped (opspool.go), with the arrays it read the
// old service into. An answered request is reused too (pendingTable's
// take and recycle), unless a second copy of it still waits in the
// outbox.
//
// # Bulk lane
//
// The ops of a call of several services (UpsertBatch, DeleteBatch, Sync)
// wait in the core, once they head their queues, until admitted (bulk.go).
// While a single-service call came within Config.BulkWindow, runs are cut
// into chunks of Config.BulkChunk services when admitted, and admitted
// only while those in flight hold fewer than BulkChunk × BulkInFlight
// services, one call's lane in turn: a single call waits behind a bounded
// amount of bulk work. Otherwise every op is admitted at once and whole.
// A chunk is an op: it fails and rolls back alone.
//
// The supervisor's own work is bounded too (intake.go): while the lane is
// throttled, a large UpsertBatch, Sync or DeleteBatch is taken in 16
// services (or frontends) per Step (TakeIn steps the rest; a Sync's
// deletes start after its last chunk), so a single call waits behind one
// such chunk of validation and queueing, not behind a whole call's.
// Otherwise an UpsertBatch, Sync or DeleteBatch of more than 1,024
// services (frontends) is taken in 512 per Step, so that the children
// write a chunk while the core takes in the next. A Sync takes in the
// calls still being taken in before it finds what is stale.
//
// # Lifecycle
//
// A Core is NOT safe for concurrent use: one goroutine at a time calls
// it (in actorlb, the supervisor's). New returns an idle core, and Step(Start{}) begins the
// restore; calls stepped before the restore finishes wait, in arrival
// order. The contract with the caller:
//
//  1. Step one input at a time: Start, Stop, a messages.Call, a
//     messages.Reply or *messages.Replies, ChildFailed, ChildStopped,
//     TakeIn. When HasIntake reports a chunk due (checked after every
//     Step), step TakeIn after the inputs that came meanwhile (the actor
//     sends itself a message for it, as it does for Ready).
//  2. After each Step, deliver every Answer from Answers at once
//     (Call.Answer), before the next Step, which reuses their array.
//  3. When HasReady reports requests, call Ready, possibly after several
//     more Steps (their requests then travel together). Send each
//     Outgoing to its child, then call Advance before the next Step.
//     Advance marks the requests sent (only sent requests are resent
//     when a child fails) and empties the outbox. While Urgent reports
//     a large op's requests there, send them after that Step, without
//     waiting for more.
//  4. Step the children's replies, and tell the core when a child failed
//     (ChildFailed, with the message it failed on) or stopped and was
//     spawned again (ChildStopped).
//  5. Step(Stop{Err}) when the core goes away: every op in flight or
//     queued is answered with Err.
//
// Config.OnUp, OnDown and OnRestoreFailed run inside Step. Config.Now is
// the only clock.
//
// # Error contract
//
// Nothing here panics on a bad call: a call that fails validation gets
// its answer with the error (wrapping loadbalancer.ErrInvalid) and starts
// no op. Failures wrap the sentinels of errors.go (ErrServiceNotFound,
// ErrServiceIDInUse, ...) or the children's errors (maps.ErrMapFull, ...).
// They are prefixed with the operation, and with the step that failed
// when one did: "upsert service 10.96.0.1:80/TCP: write service: ...".
// A rollback that fails too appends "; rollback failed: ...". Restore
// failures start with "restore: ", and every call after one fails with
// that error. One service of a batch can fail alone: the others go on;
// a map write that fails fails the op's services (a run's, or a chunk's).
package engine
