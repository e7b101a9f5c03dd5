// Package actorsys makes the protoactor actor systems actorlb runs its
// actors in (the engine's and the conntrack GC's), with a process
// registry sized for the dozen actors an engine has.
//
// protoactor-go's process registry spreads the PIDs over 1,024 buckets,
// each a concurrent map (github.com/orcaman/concurrent-map) of
// SHARD_COUNT shards, 32 by default: 32,768 Go maps and as many locks,
// some 2.8 MB that a new process writes for the first time while New
// opens the pinned maps, and that New then waits for (2.5-6.4 ms of a
// restart of 10,000 services on the development VM, 3-8%:
// docs/performance-history.md). The 1,024 buckets alone give a dozen actors locks
// of their own. This package sets SHARD_COUNT to 1 when it is
// initialized, so that a bucket is one map: 1,024 maps, some 120 KB.
//
// Lifecycle: the setting is made once, by init, before any code of the
// module can make an actor system. SHARD_COUNT is that package's global,
// read at every access to every such map, so it must not change while
// one exists: init changes it only from its default (a program that set
// it first keeps its value), and nothing changes it afterwards. A map
// made with 32 shards before this package was initialized (by the init
// of another package of a program that uses concurrent-map v1 itself)
// would find only its first shard afterwards; protoactor makes its maps
// with the actor system, after.
//
// Error contract: New cannot fail, as protoactor's NewActorSystem cannot.
package actorsys
