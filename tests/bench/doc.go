// Command bench measures actorlb against real pinned BPF maps and writes
// bench-results.json. Every machine-dependent figure is also given as a
// ratio against a floor measured in the same run: a plain loop writing the
// same map entries, one bpf() update per entry with pre-marshalled keys and
// values, and the same with BatchUpdate (three passes on fresh maps, the
// median counting).
//
// Scenarios: machine (run first, on a quiet machine: one thread per
// processor reads the clock in a loop for a second, and each gap of
// 100 µs or more between two readings is a time the machine did not run
// a thread that had work, as when a hypervisor takes a vCPU away: the
// stalls per busy second of 500 µs and of 1 ms or longer, the share of
// the time lost and the longest; a latency figure can be no better),
// bulk-10k-x10 (10,000 services of 10 backends by 8 callers,
// through UpsertBatch, then again with one Upsert each while the latency
// probes run, three rounds on fresh engines, the medians reported with
// the range of the rate's ratio (*_min, *_max) and the probes' samples
// pooled: upsert-latency; the *_during_batches rows pool the samples
// of four probe loops beside the batched bulk, on three fresh engines, the
// *_during_sync rows those of the same probes beside one SyncSource of the
// whole set, a Kubernetes resync, each with the collections per round
// (gc_cycles_*) and the bytes allocated per service meanwhile
// (alloc_bytes_per_service_during_*); the page faults of the batched rounds,
// and the scheduler's wait, runnable goroutine for a processor, over the
// single-call bulk: sched_wait_*),
// bulk-10k-x10-spread (the batched bulk again with a cluster's addresses,
// benchset.Spread, its rounds alternating with the sequential bulk's:
// against the same batch floor, and each round's CPU and user CPU against
// the sequential round's before it),
// memory-10k-x10 (heap retained by the
// last single-call round's engine, the callers' services live before and after, so
// that only the engine's own memory counts), restore-10k-x10 (three warm
// restarts on its maps, against a raw and a typed dump, with the phases,
// page faults, CPU time and heap allocated (alloc_mib) of each restore
// and the raw dump's CPU time, and cores_busy, the restore's CPU time
// over its wall time; then the raw
// dump and the restore each in a new process, three times, with their
// page faults and CPU time: *_new_process,
// the restore also with 4 KiB pages only, *_4k_pages, and, a diagnostic,
// on a heap already faulted in, *_prefaulted, with the cost of one first
// write of a fresh page),
// reconcile-10k-x10 (one drift check of the restored maps after each
// restart, nothing to repair: wall and CPU time, against the raw dump,
// and the bytes it allocates; then single upserts, one probe loop, while
// eight reconciles run one after the other: their p50, p99 and longest,
// *_beside),
// sequential-2k-x10 (2,000 single Upsert calls of 10-backend services one
// after the other on an otherwise idle engine, with the supervisor's ID
// lease and without it, three alternated rounds each on fresh engines:
// latency quantiles, CPU per call, and the lease's p50 and p90 as a ratio
// to those without it), update-10k-x10 (an endpoint change on every
// service of the bulk: each upserted again with its last backend replaced,
// through UpsertBatch, three rounds on fresh engines holding the bulk: rate,
// CPU and bytes allocated per service, against a floor writing the kernel
// changes such an update makes, batched: the new backends, the slots
// pointing at them, the old backends deleted) and insert-50k-x1 (50,000
// single-backend services inserted and deleted, in batches and one call
// each).
//
// Kubernetes mode, against a real etcd and kube-apiserver (tests/kube/
// cluster; skipped with a message when `make kube-tools` has not built
// them): k8s-latency-N times single changes (service created, endpoint
// added, endpoint not ready, endpoint terminating, service deleted) with N
// services loaded, each from just before its apiserver write to the moment
// a poll of the pinned maps sees the entries right (the translation of the
// objects as written), with the source (k8s/source) in-process on a real
// engine, beside the apiserver's own write->watch-event floor measured in
// the same run (cluster.MeasureWatchLatency); k8s-sync-N-xE starts an agent
// (this program again, --kube-sync-agent: engine and source, nothing else)
// on a cluster holding N services of E endpoints and times the initial sync
// from the informers' sync to the last map write, against UpsertBatch of
// the same translated set on fresh maps in that process, and reports the
// agent's RSS and heap with the informer caches.
//
// Run it as root: go run ./tests/bench (or make bench); --help lists the
// sizes and the profile flags (--cpuprofile and friends, --heapprofile).
// --markdown-from prints the README's tables from a finished run's
// bench-results.json (the engine's figures with their CPU per operation,
// and issue 18's targets judged again from the rows they name) and
// measures nothing; with more files, a column gives each figure's range
// over the runs. A file that is not a run's rows is refused, naming it.
//
// Lifecycle: it pins everything under a fresh directory on bpffs and
// removes it when done.
//
// Error contract: any failure ends the run with a message on stderr and
// exit status 1; no partial results file is written.
package main
