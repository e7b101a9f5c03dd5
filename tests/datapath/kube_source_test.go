//go:build !kubesource

package datapath

import (
	"context"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// INTERIM: until k8s/source is merged, a stand-in that lists and syncs
// every 50ms, so the environment can be exercised. Replaced by the real
// source.

type runningSource struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (k *kenv) startSource(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSource{cancel: cancel, done: make(chan struct{})}
	eng := k.engine
	go func() {
		defer close(rs.done)
		for ctx.Err() == nil {
			if want, err := k.desiredErr(ctx); err == nil {
				_, _ = eng.SyncSource(ctx, lb.SourceKubernetes, want)
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	k.src = rs
}

func (k *kenv) stopSource(t testing.TB) {
	if k.src == nil {
		return
	}
	k.src.cancel()
	<-k.src.done
	k.src = nil
}
