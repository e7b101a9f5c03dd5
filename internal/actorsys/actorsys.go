package actorsys

import (
	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"
)

const (
	// defaultShards is concurrent-map's own SHARD_COUNT.
	defaultShards = 32
	// RegistryShards is the shards of each bucket of a process registry
	// once this package is initialized.
	RegistryShards = 1
)

func init() {
	if cmap.SHARD_COUNT == defaultShards {
		cmap.SHARD_COUNT = RegistryShards
	}
}

// New returns a new actor system configured by opts
// (actor.NewActorSystem), its registry's buckets of RegistryShards
// shards each.
func New(opts ...actor.ConfigOption) *actor.ActorSystem {
	return actor.NewActorSystem(opts...)
}
