// Package actors holds actorlb's actors: the supervisor (engine), the ID
// allocator, the service and backend map owners per IP family and the
// revNAT owner. Each owns one piece of state; they talk only by messages.
//
// Batching: the supervisor queues its requests per child (its outbox) and
// sends them when it has handled the messages in its mailbox, several in
// one messages.Batch; children answer several at once with
// messages.Replies, and map owners write what their mailbox holds in one
// batched system call. A child handles a Batch exactly as the requests one
// by one, so crash handling is per request.
//
// Lifecycle: the supervisor spawns its children and restarts them when they
// fail; every map owner rebuilds its mirror from its map when it starts.
//
// Error contract: every request gets a typed reply whose Err says which step
// failed; nothing is left half-applied.
package actors
