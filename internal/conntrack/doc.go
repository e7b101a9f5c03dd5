// Package conntrack is the Go side of the packet datapath's connection
// tracking (issue 17, SPEC17 "Conntrack maps"): the byte layouts of the
// forward maps lb4_ct / lb6_ct and the reverse maps lb4_ct_rev /
// lb6_ct_rev, which the XDP/tc programs create and write, and their
// garbage collector.
//
// The collector has two layers:
//
//   - Collector (collector.go) is the deterministic core: plain data and
//     functions, no I/O, no clock. Given a page of entries read from one
//     map, the monotonic time and the Timeouts, it says which keys to
//     delete (expired forward entries with their reverse partners, reverse
//     entries whose forward partner is gone or expired) and counts what it
//     saw. It asks for partners through the Partners interface.
//   - Scanner (scanner.go) runs the core over the real maps, opened from
//     their pins under a bpffs root: at most PerTick entries per Tick,
//     read with BPF_MAP_LOOKUP_BATCH (falling back to key iteration where
//     the kernel lacks batch operations), resuming from a cursor across
//     ticks; a full pass visits lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev in
//     that order, then the next pass starts. Maps that are not pinned (no
//     datapath attached) are skipped: the scanner idles and says so in its
//     Stats.
//
// Lifecycle: a Scanner holds the maps' file descriptors from the start of
// a pass to its end (reopened from the pins at each pass, so a datapath
// that recreated its maps is followed); Close releases them. A Scanner is
// not safe for concurrent use: one owner (the conntrack actor) calls it.
//
// Error contract: decoding errors name the layout and the size received
// (ErrSize). A map whose pin exists with another shape is skipped and
// reported (ErrIncompatible in Stats.LastError), never written. Tick
// returns the first error of its tick; it deletes nothing it could not
// decide on (a partner lookup that fails keeps the entry).
package conntrack
