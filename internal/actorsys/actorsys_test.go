package actorsys

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"
	"github.com/stretchr/testify/require"
)

// Each of the registry's 1,024 buckets is one map, not 32.
func TestRegistryBucketsAreOneMapEach(t *testing.T) {
	require.Equal(t, RegistryShards, cmap.SHARD_COUNT)
	sys := New()
	t.Cleanup(sys.Shutdown)
	buckets := sys.ProcessRegistry.LocalPIDs.LocalPIDs
	require.Len(t, buckets, 1024)
	for i, b := range buckets {
		require.Len(t, b, RegistryShards, "bucket %d", i)
	}
}

// echo answers each string with itself.
type echo struct{}

func (echo) Receive(c actor.Context) {
	if s, ok := c.Message().(string); ok {
		c.Respond(s)
	}
}

// Actors spawned, asked and stopped from several goroutines at once are
// each found by their name while they live and gone once stopped: the
// registry works with one shard a bucket (and, under -race, without a
// data race).
func TestActorsAreFoundWhileTheyLiveAndGoneOnceStopped(t *testing.T) {
	sys := New()
	t.Cleanup(sys.Shutdown)
	base := registered(sys)
	const workers, each = 8, 40
	props := actor.PropsFromProducer(func() actor.Actor { return echo{} })
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	pids := make(chan *actor.PID, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("echo-%d-%d", w, i)
				pid, err := sys.Root.SpawnNamed(props, name)
				if err != nil {
					errs <- fmt.Errorf("spawn %s: %w", name, err)
					return
				}
				got, err := sys.Root.RequestFuture(pid, name, 5*time.Second).Result()
				if err != nil || got != name {
					errs <- fmt.Errorf("ask %s: %v, %v", name, got, err)
					return
				}
				if _, err := sys.Root.SpawnNamed(props, name); err == nil {
					errs <- fmt.Errorf("spawn %s twice: no error", name)
					return
				}
				pids <- pid
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	close(pids)
	require.Equal(t, base+workers*each, registered(sys), "every live actor is in the registry once")
	for pid := range pids {
		require.NoError(t, sys.Root.StopFuture(pid).Wait())
	}
	require.Equal(t, base, registered(sys), "stopped actors leave the registry")
}

// registered counts the PIDs in sys's registry.
func registered(sys *actor.ActorSystem) int {
	n := 0
	for _, b := range sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		n += b.Count()
	}
	return n
}
