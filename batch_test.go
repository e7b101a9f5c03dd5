package actorlb

import (
	"fmt"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// UpsertBatch answers each service on its own: invalid ones fail alone,
// the others land in the maps exactly as single upserts would.
func TestUpsertBatchAndDeleteBatch(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	var svcs []*lb.Service
	for i := range 50 {
		svcs = append(svcs, mustService(t, fmt.Sprintf("10.96.0.%d:80", i+1),
			fmt.Sprintf("10.0.1.%d:8080", i+1), "10.0.9.9:8080")) // one backend shared by all
	}
	bad := mustService(t, "10.96.1.1:80", "10.0.1.1:8080")
	bad.Backends[0].Port = 0
	batch := append(append([]*lb.Service{}, svcs[:25]...), bad, nil)
	batch = append(batch, svcs[25:]...)

	rs, err := e.UpsertBatch(ctx, batch)
	require.NoError(t, err)
	require.Len(t, rs, len(batch))
	require.ErrorContains(t, rs[25].Err, "upsert service 25 of the batch: invalid backends[0].port")
	require.ErrorContains(t, rs[26].Err, "upsert service 26 of the batch: invalid frontend")
	ids := map[lb.ServiceID]bool{}
	for i, r := range rs {
		if i == 25 || i == 26 {
			continue
		}
		require.NoError(t, r.Err, "service %d", i)
		require.True(t, r.Created)
		require.False(t, ids[r.ID], "ID %d twice", r.ID)
		ids[r.ID] = true
	}
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 50)
	checkInvariants(t, e)
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	for _, step := range []string{"wait in queue", "acquire IDs", "write backends and revNAT", "write service", "commit"} {
		require.EqualValues(t, 50, st.Steps[step].Count, "step %q", step)
		require.Positive(t, st.Steps[step].Total, "step %q", step)
	}
	sent, msgs := st.RequestsSent, st.ChildMessages

	// Again, with a backend removed from each: updates, not creations.
	for _, s := range svcs {
		s.Backends = s.Backends[:1]
	}
	rs, err = e.UpsertBatch(ctx, svcs)
	require.NoError(t, err)
	for i, r := range rs {
		require.NoError(t, r.Err, "service %d", i)
		require.False(t, r.Created)
	}
	checkInvariants(t, e)
	st, err = e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 50, st.Backends, "the shared backend is gone")
	// No backend in common now: the 50 ops ran side by side and their
	// requests to each child shared messages.
	require.Greater(t, st.RequestsSent-sent, 2*(st.ChildMessages-msgs), "requests per child message")

	fes := []lb.L3n4Addr{svcs[0].Frontend.L3n4Addr, bad.Frontend.L3n4Addr}
	for _, s := range svcs[1:] {
		fes = append(fes, s.Frontend.L3n4Addr)
	}
	ds, err := e.DeleteBatch(ctx, fes)
	require.NoError(t, err)
	require.Len(t, ds, 51)
	require.ErrorIs(t, ds[1].Err, ErrServiceNotFound)
	for i, d := range ds {
		if i != 1 {
			require.NoError(t, d.Err, "frontend %d", i)
			require.True(t, ids[d.ID])
		}
	}
	list, err = e.List(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
	checkInvariants(t, e)
	st, err = e.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Backends)
}
