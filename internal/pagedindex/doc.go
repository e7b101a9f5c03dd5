// Package pagedindex is a map from integer keys that come mostly in runs
// (IDs an allocator hands out in order, addresses given out from a
// range): a run's keys share pages of 64 values instead of each taking,
// and probing, a slot of a hash table. actorlb keys its mirrors' indexes
// by backend and service ID; Packed keys the indexes by address (the
// core's backends and frontends, the service mirror's frontends): the
// keys its Runs accept (IPv4 addresses, by a run key with their last bits
// lowest) in an Index, the others in a packedmap.Map.
//
// # Lifecycle
//
// An Index (New, NewSparse) or a Packed (NewPacked) is a plain data
// structure: no goroutines, no
// locks. It is NOT safe for concurrent use; its owner (one actor) calls
// it from one goroutine at a time.
//
// # Error contract
//
// Nothing here returns an error.
package pagedindex
