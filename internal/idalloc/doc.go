// Package idalloc is the pure core of actorlb's ID allocator. An Allocator
// binds keys (a frontend address, for service IDs) to small unsigned IDs
// in [1, max], counts references per key, reserves IDs restored from
// pinned maps at start, and holds freed IDs whose previous owner still has
// entries in a map. A Space hands out IDs without keys and keeps only
// which are in use, about one bit each: backend IDs, which the
// supervisor's backend index binds to backends and frees itself once
// their entries are gone.
//
// # Lifecycle: one owner
//
// An Allocator is a plain data structure: no goroutines, no locks, no I/O.
// It is NOT safe for concurrent use. Exactly one owner (the allocator actor)
// creates it with New and calls its methods from one goroutine at a time;
// everyone else talks to that owner by messages. Results that are slices
// (Bindings, Unclaimed) are fresh copies the caller may keep or send.
//
// An ID moves through these states:
//
//	free ──Acquire/AcquireID──▶ bound (refs ≥ 1) ──Release to 0 refs──▶ free
//	free ──Restore──▶ reserved (refs 0) ──Acquire/AcquireID same key──▶ bound
//	reserved ──DropReservation──▶ free
//	free ──Hold──▶ held ──Unhold──▶ free
//	free ──Lease──▶ held ──Claim──▶ bound (refs 1)
//
// A reserved ID belongs to its key: a fresh Acquire for another key never
// gets it. A held ID belongs to nobody but is not handed out either; the
// owner holds an ID while the map entries of its previous owner are being
// deleted, so an ID is never given to a new key while a map still has
// entries for the old one. Lease holds free IDs for a client that binds
// them itself (without a round trip to the owner) and tells the owner
// with Claim. Zero is never handed out.
//
// Acquire searches for a free ID from a cursor that moves forward past every
// ID it hands out and rolls over from max to 1, so a freed ID is reused as
// late as possible. The search is bounded by the size of the space, and a
// full space (bound + reserved + held = max) fails in O(1).
//
// # Memory
//
// An Allocator keeps one map entry per key (the key and 8 bytes) and the
// IDs, those in use and those held, in paged bitmaps; NewCompact keeps the
// keys a packedmap.Packer packs (IPv4 addresses, for actorlb) in 8 bytes
// instead of 20 or 32. NewRuns keeps the keys that come in runs (IPv4
// frontends a cluster hands out in order) in a pagedindex.Packed, 8 bytes
// a key in a page of 64 shared by a run, where each Acquire of a Go map's
// key probed a table of a megabyte or more.
//
// # Error contract
//
// Every error matches exactly one of the sentinels in errors.go under
// errors.Is. Two are also typed errors with exported fields so the caller can
// build its own messages:
//
//   - *ConflictError (errors.Is ErrIDInUse): the ID belongs to another key;
//     Key is the owner, Reserved says whether the owner only has a restored,
//     unclaimed reservation.
//   - *KeyBoundError (errors.Is ErrKeyBound): the key already owns a
//     different ID.
//
// A method that returns an error has changed nothing.
package idalloc
