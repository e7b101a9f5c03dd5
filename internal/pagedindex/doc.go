// Package pagedindex is a map from integer keys that come mostly in runs
// (IDs an allocator hands out in order, addresses given out from a
// range): a run's keys share pages of 64 values instead of each taking,
// and probing, a slot of a hash table. actorlb keys its mirrors' indexes
// by backend and service ID, and the core's index of backends by address
// (an IPv4 backend's packed key, its address's last bits lowest).
//
// # Lifecycle
//
// An Index is a plain data structure made by New: no goroutines, no
// locks. It is NOT safe for concurrent use; its owner (one actor) calls
// it from one goroutine at a time.
//
// # Error contract
//
// Nothing here returns an error.
package pagedindex
