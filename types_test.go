package actorlb

import (
	"testing"

	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// Every service type, traffic policy, affinity timeout, weight, node-local
// flag and maintenance backend survives a restart from the pinned maps
// alone, with no map write, and the maps verify clean before and after.
func TestServiceOptionsSurviveARestartWithZeroWrites(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	ctx := ctxT(t)
	e := newEngine(t, root, Config{})

	np := mustService(t, "192.168.1.10:30080", "10.0.1.1:8080", "10.0.1.2:8080", "10.0.1.3:8080")
	np.Type, np.ExtTrafficPolicyLocal = lb.SVCTypeNodePort, true
	np.Backends[0].NodeLocal = true
	np.Backends[1].Weight = 300
	np.Backends[2].State = lb.BackendStateMaintenance

	lbs := mustService(t, "[2001:db8::5]:443", "[fd00::1]:8443", "[fd00::2]:8443")
	lbs.Type, lbs.IntTrafficPolicyLocal = lb.SVCTypeLoadBalancer, true
	lbs.Backends[1].NodeLocal = true
	lbs.SessionAffinity, lbs.SessionAffinityTimeout = true, 77

	cip := mustService(t, "10.96.0.10:53/udp", "10.0.2.1:53/udp", "10.0.2.2:53/udp")
	cip.IntTrafficPolicyLocal = true // one set: only the local backend has a slot
	cip.Backends[1].NodeLocal = true
	cip.Backends[0].Weight = 0

	ext := mustService(t, "203.0.113.9:80", "10.0.3.1:80")
	ext.Type, ext.SessionAffinity = lb.SVCTypeExternalIPs, true // default timeout
	hp := mustService(t, "0.0.0.0:8080", "10.0.4.1:80")
	hp.Type = lb.SVCTypeHostPort
	sur := mustService(t, "0.0.0.0:30081", "10.0.5.1:80")
	sur.Type = lb.SVCTypeNodePort

	var want []*lb.Service
	for _, s := range []*lb.Service{np, lbs, cip, ext, hp, sur} {
		id, _, err := e.Upsert(ctx, s)
		require.NoError(t, err, s.Frontend.String())
		got, err := e.Get(ctx, id)
		require.NoError(t, err)
		want = append(want, got)
	}
	d, err := e.DumpMaps(ctx)
	require.NoError(t, err)
	require.Empty(t, verify.Check(table.Dump(d)), "maps after the upserts")
	require.NotEmpty(t, d.Members)
	require.NotEmpty(t, d.AffinityMatch)
	require.NoError(t, e.Close())

	e2 := newEngine(t, root, Config{})
	st, err := e2.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Restore.Repairs, "%v", st.Restore.RepairsByKind)
	require.Zero(t, st.Restore.Writes, "a warm restart writes nothing")
	for _, w := range want {
		got, err := e2.Get(ctx, w.Frontend.ID)
		require.NoError(t, err)
		require.Equal(t, w, got, "%s after the restart", w.Frontend)
	}
	d2, err := e2.DumpMaps(ctx)
	require.NoError(t, err)
	require.Empty(t, verify.Check(table.Dump(d2)))
	var written uint64
	for _, m := range st.Maps {
		written += m.Updated + m.Deleted
	}
	require.Zero(t, written, "no entry written or deleted by the restart")
	require.Equal(t, len(maps.Names), len(st.Maps))
}

// A service's source survives a restart with zero writes; the API can
// neither change nor delete a Kubernetes service, and a sync of one source
// deletes only that source's services.
func TestSourceOwnershipSurvivesARestartAndGuardsWrites(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	ctx := ctxT(t)
	e := newEngine(t, root, Config{})

	k8sPlain := mustService(t, "10.96.0.1:80", "10.0.1.1:8080")
	k8sPlain.Source = lb.SourceKubernetes
	k8sWeighted := mustService(t, "[fd00:96::2]:443", "[fd00::1]:8443", "[fd00::2]:8443")
	k8sWeighted.Source = lb.SourceKubernetes
	k8sWeighted.Backends[0].Weight = 7
	api := mustService(t, "10.96.0.3:80", "10.0.1.1:8080") // shares a backend with k8sPlain
	ids := map[string]lb.ServiceID{}
	for _, s := range []*lb.Service{k8sPlain, k8sWeighted, api} {
		id, _, err := e.Upsert(ctx, s)
		require.NoError(t, err, s.Frontend.String())
		ids[s.Frontend.String()] = id
	}
	require.NoError(t, e.Close())

	e2 := newEngine(t, root, Config{})
	st, err := e2.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Restore.Repairs, "%v", st.Restore.RepairsByKind)
	require.Zero(t, st.Restore.Writes, "a warm restart writes nothing")
	for _, s := range []*lb.Service{k8sPlain, k8sWeighted, api} {
		got, err := e2.Get(ctx, ids[s.Frontend.String()])
		require.NoError(t, err)
		require.Equal(t, s.Source, got.Source, "%s after the restart", s.Frontend)
	}

	change := mustService(t, "10.96.0.1:80", "10.0.1.9:8080") // the API, on the Kubernetes frontend
	_, _, err = e2.Upsert(ctx, change)
	require.ErrorIs(t, err, ErrFrontendOwned)
	require.ErrorContains(t, err, "owned by kubernetes")
	require.ErrorIs(t, e2.Delete(ctx, ids[k8sPlain.Frontend.String()]), ErrFrontendOwned)
	rs, err := e2.DeleteBatch(ctx, []lb.L3n4Addr{k8sWeighted.Frontend.L3n4Addr})
	require.NoError(t, err)
	require.ErrorIs(t, rs[0].Err, ErrFrontendOwned)
	got, err := e2.Get(ctx, ids[k8sPlain.Frontend.String()])
	require.NoError(t, err)
	require.Equal(t, k8sPlain.Backends[0].L3n4Addr, got.Backends[0].L3n4Addr, "the refused upsert changed nothing")

	// The sync of Kubernetes keeps k8sPlain, deletes k8sWeighted, and
	// leaves the API's service; the API's own upsert of its frontend
	// through the Kubernetes sync fails that service alone.
	clash := mustService(t, "10.96.0.3:80", "10.0.1.5:8080")
	clash.Source = lb.SourceKubernetes
	res, err := e2.SyncSource(ctx, lb.SourceKubernetes, []*lb.Service{k8sPlain, clash})
	require.ErrorIs(t, err, ErrFrontendOwned)
	require.Equal(t, 1, res.Upserted)
	require.Equal(t, 1, res.Deleted)
	require.Len(t, res.Failed, 1)
	require.Equal(t, clash.Frontend.L3n4Addr, res.Failed[0].Frontend)
	list, err := e2.List(ctx)
	require.NoError(t, err)
	var fes []string
	for _, s := range list {
		fes = append(fes, s.Frontend.String()+"="+s.Source.String())
	}
	require.ElementsMatch(t, []string{"10.96.0.1:80/TCP=kubernetes", "10.96.0.3:80/TCP=api"}, fes)

	_, err = e2.SyncSource(ctx, lb.SourceKubernetes, []*lb.Service{api})
	require.ErrorContains(t, err, "its source is api, the sync's is kubernetes")
	d, err := e2.DumpMaps(ctx)
	require.NoError(t, err)
	require.Empty(t, verify.Check(table.Dump(d)))
}
