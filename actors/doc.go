// Package actors holds actorlb's actors (protoactor-go). Each owns one
// piece of state, and they talk only by messages (package messages). The
// names used here (engine, core, edge, call, op, step, request, reply,
// queue, outbox, holds, snapshot, owner, mirror) are defined once, in the
// glossary of docs/architecture.md.
//
//   - The keeper (keeper.go) is the top-level actor. Its one child is the
//     supervisor, which it restarts when it fails and spawns again when
//     it is stopped.
//   - The supervisor (supervisor.go) is the engine's actor: it spawns and
//     supervises the children and is a thin translation over the core
//     (internal/engine.Core), which holds all the operation logic.
//     Receive turns messages into inputs of the core: calls from the edge,
//     replies from children, a child failed (HandleFailure) or stopped.
//     It delivers the core's answers at once, and sends the core's requests
//     when a flush message to itself comes back, after the messages that
//     were in its mailbox: the requests of every op they advanced go to
//     each child together (one message per child: the request itself, or
//     a messages.Batch of several). While the core's outbox is urgent
//     (Core.Urgent: it holds a request of a large op, a batch's run), the
//     supervisor sends it at once, after the input, so that the children
//     start on a large op while the calls queued behind it are stepped.
//   - The allocator (allocator.go) owns the service and backend ID
//     spaces (internal/idalloc): service IDs bound to their frontends,
//     backend IDs only as in use or free (the core's backend index binds
//     them to backends). Its state is only in memory: after a
//     restart it queues every request until the core's snapshot
//     (messages.AllocRestore) arrives.
//   - The map owners (mapowner.go) own one map each (svc4, svc6: the
//     service maps; be4, be6: the backend maps) or both revNAT maps
//     (revnat), and an in-memory mirror of it (mirror.go, svcmirror.go).
//     They write what their mailbox holds in batched calls of at most
//     4,096 entries (a flush of bulk requests only is answered a batch
//     at a time, any other at its end), skip entries the map already
//     holds, and answer dumps from the mirror. A
//     drift check (MapReconcile) reads the map on a goroutine of its own
//     while the owner goes on writing, and the owner compares the dump a
//     step a message, its writes between two steps (checks.go, drift.go);
//     the owner waits for that goroutine before it stops or restarts.
//     members and affinity own lb_members and lb_affinity_match the same
//     way.
//   - The Maglev owner (maglev.go, maglev) owns lb4_maglev and lb6_maglev.
//     The core sends it each maglev service's inputs (backends, IDs,
//     weights); it builds the table (internal/maglev) off the supervisor's
//     path (two or more of a flush ahead on two goroutines, prebuild)
//     and writes it only when an entry changed; the new tables of one
//     flush join the maps in one batch (applyAll). It keeps per table
//     two digests, not the table (maglevOwner, a pure core over
//     maps.MaglevMap), and reads a table from the map when it does not know
//     what the map holds.
//   - The source-range owner (srcrange.go, srcrange) owns lb4_source_range
//     and lb6_source_range: a mapActor over familyMirrors, one mirror per
//     family, each key going to its address's family. The core writes a
//     service's ranges before the master that carries FlagSourceRange and
//     deletes them after the master no longer does.
//   - The conntrack GC actor (conntrack.go) is apart from the engine: the
//     façade's StartConntrackGC spawns it in an actor system of its own.
//     It owns a conntrack.Scanner over the packet datapath's conntrack
//     maps and runs one bounded tick per timer message, setting the timer
//     again only after the tick.
//
// Every mailbox runs on the engine's Dispatcher (dispatch.go): a few
// long-lived goroutines that keep their grown stacks, rather than a new
// goroutine per mailbox run.
//
// Children handle a messages.Batch exactly as its requests one by one,
// and may answer several at once with messages.Replies, so crash handling
// is per request.
//
// Lifecycle: the keeper spawns the supervisor; each incarnation of the
// supervisor spawns its children, starts an empty core and restores from
// the maps. A map owner loads its mirror from its map whenever it starts,
// before it handles any message, and indexes it when the supervisor says
// the core has restored (indexMirror) or first needs the index, whichever
// comes first. When a child fails, the supervisor has
// it restarted; when it stops, the supervisor spawns it again; either
// way the core resends what the child owed (the allocator's snapshot
// first). When the supervisor restarts, its children
// are stopped with it and the calls in flight are answered with
// ErrEngineRestarted, which the edge sends again.
//
// Error contract: every request gets a typed reply whose Err says what
// failed. Map owners report the maps' errors (maps.ErrMapFull, ...) and
// reload their mirror after a failed write. The allocator maps idalloc's
// errors onto the engine's sentinels (ErrServiceIDInUse, ErrFrontendInUse,
// ErrIDSpaceExhausted), and an acquire that fails takes nothing. A map
// owner that cannot read its map at start panics, so that it is
// restarted. The supervisor answers a call it panicked on with an error
// before the keeper restarts it.
package actors
