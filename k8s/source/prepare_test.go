package source

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// freshDesired is what a state that sees svcs and sls at once wants.
func freshDesired(t *testing.T, nodeAddrs []string, svcs []*corev1.Service, sls []*discoveryv1.EndpointSlice) []string {
	t.Helper()
	st := NewState(testNode, addrs(nodeAddrs...))
	for _, s := range svcs {
		st.UpsertService(s, time.Time{})
	}
	for _, s := range sls {
		st.UpsertSlice(s, time.Time{})
	}
	return renderAll(st.Desired())
}

// Services translated before the sync are not translated again at the
// sync unless they changed since; the result is the same as translating
// everything then.
func TestPreparedServicesAreNotTranslatedAgainUnlessChanged(t *testing.T) {
	st := NewState(testNode, addrs("198.18.0.1"))
	var svcs []*corev1.Service
	var sls []*discoveryv1.EndpointSlice
	for i := range 5 {
		name := fmt.Sprintf("s%d", i)
		svcs = append(svcs, service("ns", name, fmt.Sprintf("10.96.0.%d", i+1), rv("1")))
		sls = append(sls, slice("ns", name+"-1", name, fmt.Sprintf("10.0.0.%d", i+1)))
	}
	for i := range svcs {
		st.UpsertService(svcs[i], time.Time{})
		st.UpsertSlice(sls[i], time.Time{})
	}
	require.False(t, st.Prepare(0), "everything translated")
	require.Equal(t, 5, st.translations)
	require.Empty(t, st.dirtyKeys)

	// The same version again (a re-list) changes nothing; s2 changes.
	st.UpsertService(svcs[0].DeepCopy(), time.Time{})
	svcs[2] = service("ns", "s2", "10.96.0.2", rv("2"), externalIPs("198.18.1.2"))
	st.UpsertService(svcs[2], time.Time{})

	got := renderAll(st.Desired())
	require.Equal(t, 6, st.translations, "only the changed service is translated again")
	require.Equal(t, freshDesired(t, []string{"198.18.0.1"}, svcs, sls), got)
	require.Contains(t, got, "ExternalIPs 198.18.1.2:80/TCP -> 10.0.0.3:8080/TCP(active)")
}

// A partial Prepare takes at most the count given, and says whether some
// are left; together they translate every service once.
func TestPartialPrepareTranslatesEachServiceOnce(t *testing.T) {
	st := NewState(testNode, nil)
	var svcs []*corev1.Service
	for i := range 7 {
		s := service("ns", fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d", i+1))
		svcs = append(svcs, s)
		st.UpsertService(s, time.Time{})
	}
	calls := 0
	for st.Prepare(3) {
		calls++
		require.Equal(t, 3*calls, st.translations)
		require.Less(t, calls, 10, "bounded")
	}
	require.Equal(t, 7, st.translations)
	got := renderAll(st.Desired())
	require.Equal(t, 7, st.translations, "nothing left at the sync")
	require.Equal(t, freshDesired(t, nil, svcs, nil), got)
	require.False(t, st.Prepare(3), "nothing to do")
}

// A slice that arrives (or changes, or goes) after its service was
// translated makes it be translated again.
func TestSlicesArrivingAfterPrepareInvalidateTheTranslation(t *testing.T) {
	st := NewState(testNode, nil)
	svc := service("ns", "web", "10.96.0.1")
	st.UpsertService(svc, time.Time{})
	st.Prepare(0)
	require.Equal(t, 1, st.translations)

	sl := slice("ns", "web-1", "web", "10.0.0.1")
	st.UpsertSlice(sl, time.Time{})
	require.Equal(t, []string{"ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)"}, renderAll(st.Desired()))
	require.Equal(t, 2, st.translations)

	sl2 := slice("ns", "web-2", "web", "10.0.0.2")
	st.UpsertSlice(sl2, time.Time{})
	st.Prepare(0)
	st.DeleteSlice("ns", "web-1", time.Time{})
	require.Equal(t, []string{"ClusterIP 10.96.0.1:80/TCP -> 10.0.0.2:8080/TCP(active)"}, renderAll(st.Desired()))
	require.Equal(t, 4, st.translations)
	require.Equal(t, freshDesired(t, nil, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{sl2}), renderAll(st.Desired()))
}

// New node addresses make the services with a node port be translated
// again, and only those.
func TestNodeAddressChangeInvalidatesNodePortServicesOnly(t *testing.T) {
	st := NewState(testNode, addrs("198.18.0.1"))
	svcs := []*corev1.Service{
		service("ns", "np", "10.96.0.1", nodePort(30080)),
		service("ns", "web", "10.96.0.2"),
	}
	for _, s := range svcs {
		st.UpsertService(s, time.Time{})
	}
	st.Prepare(0)
	require.Equal(t, 2, st.translations)

	st.SetNodeAddresses(addrs("198.18.0.9"))
	got := renderAll(st.Desired())
	require.Equal(t, 3, st.translations, "only the NodePort service")
	require.Contains(t, got, "NodePort 198.18.0.9:30080/TCP ->")
	require.NotContains(t, got, "NodePort 198.18.0.1:30080/TCP ->")
	require.Equal(t, freshDesired(t, []string{"198.18.0.9"}, svcs, nil), got)
}

// Translations made before the sync give nothing to apply by themselves:
// the first Pending after them is the same as without them.
func TestPrepareAppliesNothing(t *testing.T) {
	a, b := NewState(testNode, nil), NewState(testNode, nil)
	for _, st := range []*State{a, b} {
		st.UpsertService(service("ns", "web", "10.96.0.1"), time.Time{})
		st.UpsertSlice(slice("ns", "web-1", "web", "10.0.0.1"), time.Time{})
	}
	a.Prepare(0)
	require.Empty(t, a.Commit(Round{}).Names, "nothing recorded as applied")
	require.Equal(t, Counts{Pending: 1}, a.Counts())
	require.Equal(t, renderChange(b.Pending()), renderChange(a.Pending()))
}

// A large batch is translated in parallel: the outcome is the same as
// translating one service at a time, collisions included.
func TestParallelTranslationEqualsOneByOne(t *testing.T) {
	n := 3 * parallelMin
	var svcs []*corev1.Service
	var sls []*discoveryv1.EndpointSlice
	for i := range n {
		name := fmt.Sprintf("s%04d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250)
		mods := []func(*corev1.Service){createdAt(time.Duration(i%3) * time.Second)}
		if i%7 == 0 {
			mods = append(mods, externalIPs("198.18.1.1")) // contested
		}
		svcs = append(svcs, service("ns", name, ip, mods...))
		sls = append(sls, slice("ns", name+"-1", name, fmt.Sprintf("10.1.%d.%d", i/250, 1+i%250), "10.2.0.1"))
	}
	par, seq := NewState(testNode, nil), NewState(testNode, nil)
	for _, st := range []*State{par, seq} {
		for i := range svcs {
			st.UpsertService(svcs[i], time.Time{})
			st.UpsertSlice(sls[i], time.Time{})
		}
	}
	for seq.Prepare(parallelMin / 4) { // below the parallel threshold
	}
	got := renderAll(par.Desired())
	require.Equal(t, n, par.translations)
	require.Equal(t, n, seq.translations)
	require.Equal(t, renderAll(seq.Desired()), got)
	require.Len(t, got, n+1)
	require.Equal(t, seq.Conflicts(), par.Conflicts())
	require.Equal(t, renderChange(seq.Pending()), renderChange(par.Pending()))
}
