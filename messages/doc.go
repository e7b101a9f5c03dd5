// Package messages is the vocabulary actorlb's actors speak: one request
// struct and one typed reply (with an Err field) per operation, grouped by
// the actor that owns the operation.
//
// Lifecycle: a message is its receiver's once sent: the sender neither
// reads nor writes it again, and copies the slices and maps it keeps
// before sending. Receivers change no message, except that the supervisor
// puts the backends of the services of Upsert, UpsertBatch and Sync in
// slot order in place (the façade sends copies; a call sent again after a
// supervisor restart is the same copy, sorted again), and the allocator
// takes an AllocAcquire's Reuse (an earlier answer the supervisor hands
// back, which is the allocator's again from then: it answers in it).
//
// The one exception to "the receiver's once sent": the slices of a write
// request to a map owner (MapApply, RevNATApply) and the items of an
// AllocAcquire are lent. The receiver reads them until it answers and
// keeps none of them after (it copies what it keeps); once answered, the
// supervisor may fill them again for a later request. A request sent
// twice (after its receiver failed) is not reused.
//
// Error contract: failures travel in a reply's Err field, never as a bare
// error value in place of the reply.
package messages
