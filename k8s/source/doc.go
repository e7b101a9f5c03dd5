// Package source is actorlb's Kubernetes source: it watches the cluster's
// Services and discovery/v1 EndpointSlices (and, when the node addresses
// are not given, this node's Node) and keeps the engine's Kubernetes-owned
// services equal to their translation (package k8s/translate), as
// kube-proxy keeps its rules, without kube-proxy's races.
//
// # Layout
//
// State is the deterministic core: plain data and functions, no client-go
// I/O, no clock, no goroutine of its own (a large batch of translations,
// such as the full list at the sync, is spread over the CPUs and waited
// for; the results are recorded in order). It holds per service (namespace/name) the
// latest Service and its EndpointSlices (by slice name, filed under the
// service their kubernetes.io/service-name label names: a slice relabelled
// moves, a slice that arrives before its service waits for it), the node's
// name and addresses, and what was last applied per frontend. Events mark
// services dirty; Pending translates them again and returns the minimal
// Change (services new or different from what was applied, frontends
// gone); Commit records what the target did with it. A service whose
// translation did not change gives nothing, so a re-list after an outage
// writes nothing. Every service it gives has Source SourceKubernetes.
// Two Kubernetes services that translate to the same frontend (the same
// external IP and port, say) are resolved the same way every time: the
// service with the oldest creationTimestamp, then the first by
// namespace/name, gets it; the other is reported as a Conflict.
//
// Source is the thin runner: client-go shared informers (one
// SharedInformerFactory; their list/watch calls wrapped to observe the
// connection) whose handlers put
// events into an inbox, and one goroutine that owns the State and calls
// the Target. The inbox keeps the latest event per object behind a mutex
// and signals the goroutine through a channel of capacity one, so a
// handler never blocks (not even while the goroutine waits on a slow
// target), memory is bounded by the number of objects, and the goroutine
// takes everything pending at once. The informers only list and watch
// (kube-proxy's RBAC, system:node-proxier: no GET of single objects); the
// label selector is kube-proxy's (no services of another proxy, no slices
// of headless services), and the caches keep only what the source and the
// translation read (trimObject: no managedFields, annotations other than
// the trigger time, labels other than those the translation reads,
// selectors, endpoints' target references, hints, zones...).
//
// # Lifecycle
//
//  1. New checks the Config. Run asks the kernel for transparent huge
//     pages for the heap the lists and the full sync are about to fill
//     (SyncHugePages; Config.NoHugePages turns it off), then starts the
//     informers.
//  2. Until every informer has synced (its initial list delivered to the
//     source), nothing is applied: the services restored from the pinned
//     maps keep serving, and no partial view deletes anything. The
//     services received so far are translated meanwhile, a chunk at a
//     time (State.Prepare), and each translation kept until the
//     service's objects change: at the sync only what changed since is
//     left to translate.
//  3. Then one full reconciliation: Target.SyncSource with every desired
//     service. It deletes the Kubernetes-owned services that are gone and
//     never touches services of another source (the API's).
//  4. Then incremental changes: after each event the source waits
//     Config.Debounce, then applies everything pending at once, deletes
//     with DeleteBatchAs and upserts with UpsertBatch.
//  5. When ctx is done, Run stops the informers, waits for their
//     goroutines and returns nil.
//
// # Errors
//
// New returns ErrInvalidConfig naming the field. Run returns an error only
// when it cannot start (ErrAlreadyRunning: a Source runs once); it never
// returns the apiserver's or the target's failures, it retries them:
//
//   - A list/watch failure is retried by client-go; the maps keep serving
//     what was applied. Every list and watch call is observed (client-go
//     retries a refused connection without telling its watch error
//     handler): Status().Connected turns false with the error, and true
//     again once the next call of every kind works. After the re-list,
//     only what changed is written.
//   - A target call that fails as a whole is retried with exponential
//     backoff (Config.RetryMin to RetryMax); nothing is tried meanwhile,
//     and the state stays pending, so nothing is lost.
//   - A service that fails alone with a transient error stays pending and
//     is retried with the same backoff (and with the next change).
//   - A service refused with actorlb.ErrFrontendOwned (an API-created service holds
//     its frontend) or as invalid is a conflict: logged once, counted in
//     actorlb_k8s_conflicts, listed in Status().Conflicts, and tried again
//     only when its objects change or every Config.ResyncInterval.
//
// # Observability
//
// Status reports the connection, the sync, the last event and what the
// source owns; Name says which Kubernetes service a frontend belongs to.
// Metrics (on Config.Registerer): actorlb_k8s_events_total{kind,op},
// actorlb_k8s_sync_duration_seconds, actorlb_k8s_conflicts and
// actorlb_network_programming_duration_seconds, measured as kube-proxy
// does: from the endpoints.kubernetes.io/last-change-trigger-time
// annotation of the changed EndpointSlice or Service when present (and
// later than the source's start), else from the event's receipt (not for
// the initial list), to the moment the change is applied.
package source
