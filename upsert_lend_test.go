package actorlb

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// Upsert sends the caller's service itself, not a copy: the engine copies
// it when it takes the call, and the call is withdrawn before Upsert
// returns (messages.Upsert). So the service is the caller's again once
// Upsert returned, even when its context ended first: here the callers
// change their services at once (under -race, a read of the engine after
// the return would be reported), and no change reaches the maps. A call
// cancelled before it was taken is not done; one taken is applied whole,
// as it was when taken.
func TestAnUpsertsServiceIsTheCallersAgainOnceItReturns(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	rng := testutil.Rand(t)
	const n = 300
	type call struct {
		svc  *lb.Service
		want []lb.Backend // the backends it was called with
		err  error
	}
	calls := make([]call, n)
	for i := range calls {
		svc := mustService(t, fmt.Sprintf("10.96.%d.%d:80", i/250, 1+i%250),
			fmt.Sprintf("10.1.%d.%d:8080", i/250, 1+i%250), fmt.Sprintf("10.2.%d.%d:8080", i/250, 1+i%250))
		c := call{svc: svc, want: slices.Clone(svc.Backends)}
		cctx, cancel := context.WithCancel(ctx)
		yields := rng.IntN(40) // how long the call runs before its context ends
		go func() {
			for range yields {
				runtime.Gosched()
			}
			cancel()
		}()
		_, _, c.err = e.Upsert(cctx, svc)
		cancel()
		if c.err != nil {
			require.ErrorIs(t, c.err, context.Canceled)
		}
		// The caller's again: changed at once.
		svc.Backends[0].Port = 1
		svc.Backends[1].Addr = netip.MustParseAddr("10.255.255.255")
		svc.Backends = svc.Backends[:1]
		svc.Frontend.Port = 81
		calls[i] = c
	}
	require.Eventually(t, func() bool {
		st, err := e.Stats(ctx)
		return err == nil && st.OpsInFlight == 0
	}, 10*time.Second, time.Millisecond, "the calls taken did not finish")

	list, err := e.List(ctx)
	require.NoError(t, err)
	byFE := map[lb.L3n4Addr]*lb.Service{}
	for _, s := range list {
		byFE[s.Frontend.L3n4Addr] = s
	}
	cancelled, applied := 0, 0
	for _, c := range calls {
		fe := c.svc.Frontend.L3n4Addr
		fe.Port = 80
		got, ok := byFE[fe]
		if c.err != nil {
			cancelled++
		}
		if !ok {
			require.Error(t, c.err, "upsert of %s returned nil but the service is not there", fe)
			continue
		}
		applied++
		require.ElementsMatch(t, c.want, got.Backends, "service %s is not as it was called", fe)
		fe.Port = 81
		require.NotContains(t, byFE, fe, "the caller's change of its frontend reached the engine")
	}
	require.Equal(t, applied, len(list), "a service that no call made")
	t.Logf("%d calls: %d returned the context's error, %d services applied", n, cancelled, applied)
	require.Positive(t, applied, "no call was taken: the copy at the take was not exercised")
	require.Less(t, applied, n, "every call was taken: a withdrawal before the take was not exercised")
}
