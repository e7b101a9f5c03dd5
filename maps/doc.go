// Package maps holds actorlb's BPF map families — services, backends and
// reverse NAT, each for IPv4 and IPv6 — with the exact byte layouts of the
// upstream datapath (lb4_key, lb4_service, lb4_backend, lb4_reverse_nat and
// their IPv6 twins), and three implementations of each family: real kernel
// maps pinned on bpffs through cilium/ebpf, an in-memory map with the same
// semantics (for unprivileged unit tests and --dry-run), and a decorator that
// injects faults (for chaos tests). Beside them: lb_members and
// lb_affinity_match (members.go), and the Maglev maps lb4_maglev and
// lb6_maglev (maglev.go: hashes of maps keyed by service ID whose inner
// array holds one table of M backend IDs; MaglevMap writes, reads and
// deletes whole tables, with the same kernel, in-memory and fault-injecting
// behaviour; new tables are staged and join the outer map in one batch at
// Flush, deletes go in one batch, because the kernel waits for an RCU
// grace period after each update or delete of a map of maps from user
// space), and the source-range maps lb4_source_range and
// lb6_source_range (srcrange.go: BPF_MAP_TYPE_LPM_TRIE with
// BPF_F_NO_PREALLOC, keys {prefixlen = 32 + bits, service ID, pad,
// address}, value 1; a SourceRangeMap's entries are its keys, dumped in
// canonical form; the kernel has no batch operations for tries).
//
// Values are family-agnostic Go structs (ServiceKey, ServiceValue,
// BackendValue, RevNATValue); each map marshals them to its family's layout
// without reflection. The raw layouts are exposed by the Marshal* and
// Unmarshal* functions, which the layout tests check byte for byte. A dump
// comes decoded (Dump) or as read (DumpEntries: an Entries list of the
// batches' raw keys and values, decoded a chunk at a time as it is read,
// which a restore reads without ever holding the decoded copy).
//
// Lifecycle: Open returns an LBMaps holding open file descriptors; the caller
// must keep it and call Close when done. Close never unpins: pinned maps, and
// so the datapath's view, survive the process. Each map is meant to have one
// writer (its owner actor); reads from other goroutines are safe. The owner
// also reports how many entries the map holds (SetEntries), so that others
// read the count (Entries) without dumping the map.
//
// Error contract: Update and Delete are all-or-reported: on error some
// entries may have been applied (as in the kernel), and the caller repairs by
// writing the previous state again. Delete of a missing key is not an error.
// errors.Is(err, ErrMapFull) reports a full map, errors.Is(err,
// ErrIncompatible) a pinned map whose shape differs from what was asked,
// errors.Is(err, bpffs.ErrNotMounted) (re-exported as ErrNotMounted) a pin
// root that is not on bpffs.
package maps
