package datapath

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/tests/kube/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// loop starts a connect loop to a:port in the helper for d (at most
// 100,000 connects); wait returns its result. The helper answers nothing
// else meanwhile.
func (k *kenv) loop(t *testing.T, a netip.Addr, port uint16, d time.Duration) (wait func() response) {
	t.Helper()
	var (
		r    response
		err  error
		once sync.Once
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		r, err = k.helper.call(request{Op: "loop", Addr: addr(a, port), N: 100000, Duration: d, Timeout: time.Second}, d+60*time.Second)
	}()
	t.Cleanup(func() { <-done })
	return func() response {
		t.Helper()
		once.Do(func() { <-done })
		require.NoError(t, err, "connect loop")
		return r
	}
}

// ids maps each Kubernetes-owned frontend to its service ID.
func (k *kenv) ids(t testing.TB) map[lb.L3n4Addr]lb.ServiceID {
	t.Helper()
	all, err := k.engine.List(kctx(t))
	require.NoError(t, err)
	out := map[lb.L3n4Addr]lb.ServiceID{}
	for _, s := range all {
		if s.Source == lb.SourceKubernetes {
			out[s.Frontend.L3n4Addr] = s.Frontend.ID
		}
	}
	return out
}

// settled waits until the source has nothing pending.
func (k *kenv) settled(t testing.TB) {
	t.Helper()
	eventually(t, 20*time.Second, "the source has nothing pending", func() (bool, string) {
		st := k.src.src.Status()
		return st.Synced && st.Pending == 0, fmt.Sprintf("%+v", st)
	})
}

// sortedDump is the maps' entries in a canonical order, for comparison.
func sortedDump(d actorlb.MapEntries) string {
	var lines []string
	for _, s := range append(slices.Clone(d.Services4), d.Services6...) {
		lines = append(lines, fmt.Sprintf("svc %v %+v", s.Key, s.Value))
	}
	for _, b := range append(slices.Clone(d.Backends4), d.Backends6...) {
		lines = append(lines, fmt.Sprintf("be %d %+v", b.ID, b.Value))
	}
	for _, r := range append(slices.Clone(d.RevNAT4), d.RevNAT6...) {
		lines = append(lines, fmt.Sprintf("rev %d %+v", r.ID, r.Value))
	}
	for _, m := range d.Members {
		lines = append(lines, fmt.Sprintf("mem %+v", m))
	}
	for _, m := range d.AffinityMatch {
		lines = append(lines, fmt.Sprintf("aff %+v", m))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// A mixed set of services (dual-stack ClusterIP, NodePort with
// externalTrafficPolicy Local, session affinity) for the restart tests.
func (k *kenv) mixedServices(t *testing.T) (a, b []*echo, web *corev1.Service) {
	t.Helper()
	a = k.pool(t, "a", false, 0, 3, 0)
	port := a[0].addr.Port()
	b = k.pool(t, "b", true, 0, 3, port)
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	web = k.createService(t, dualStack("web", tcpPort("http", 80)))
	k.putSlice(t, "web", "web-v4", false, http, eps(kubeNode, a...))
	k.putSlice(t, "web", "web-v6", true, http, eps(otherNode, b...))
	np := dualStack("np", tcpPort("http", 80))
	np.Spec.Type = corev1.ServiceTypeNodePort
	np.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	np.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	k.createService(t, np)
	k.putSlice(t, "np", "np-v4", false, http, append(eps(kubeNode, a[0]), eps(otherNode, a[1:]...)...))
	k.putSlice(t, "np", "np-v6", true, http, eps(kubeNode, b[:2]...))
	return a, b, web
}

// An agent restart with nothing changed in the cluster: the restored
// engine and the new source's full sync keep every ID and write no map
// entry, and a connect loop running across the restart sees no failure.
func TestKubeAgentRestartWithNothingChangedWritesNothing(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a, _, web := k.mixedServices(t)
	k.startSource(t)
	k.waitSynced(t)
	k.converge(t)
	k.settled(t)
	ids, d := k.ids(t), sortedDump(k.dump(t))
	require.NotEmpty(t, ids)

	vip := clusterIPs(t, web)[0]
	const loopFor = 5 * time.Second
	loopStart := time.Now()
	wait := k.loop(t, vip, 80, loopFor)
	time.Sleep(300 * time.Millisecond)
	k.stopSource(t)
	k.restartEngine(t)
	st, err := k.engine.Stats(kctx(t))
	require.NoError(t, err)
	require.Zero(t, st.Restore.Writes, "the restore wrote")
	k.startSource(t)
	k.waitSynced(t)
	k.settled(t)
	back := time.Since(loopStart)
	require.Less(t, back, loopFor, "the restart took longer than the connect loop runs")
	r := wait()
	require.Zero(t, r.Failed, "connects failed across the restart: %v", r.Errors)
	require.Len(t, r.Names, len(a), "%v", r.Names)
	t.Logf("%d connects across the restart", r.OK)

	require.Equal(t, ids, k.ids(t), "service IDs after the restart")
	require.Equal(t, d, sortedDump(k.dump(t)), "the maps after the restart")
	require.Zero(t, k.writes(t), "map entries written or deleted by the restarted agent")
	require.Equal(t, []string{"SyncSource"}, k.src.target.Calls(), "one full sync, nothing else")
	k.converge(t)
}

// The agent is down while the cluster changes: once it is back, the
// restored services keep serving as they were (a deleted service and a
// removed endpoint included) until the source has synced: nothing is
// applied before the full sync. Then the maps are exactly the new state.
func TestKubeAgentDownWhileTheClusterChanges(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "a", false, 0, 5, 0)
	port := a[0].addr.Port()
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	single := func(name string) *corev1.Service {
		s := dualStack(name, tcpPort("http", 80))
		s.Spec.IPFamilyPolicy = nil
		s.Spec.IPFamilies = nil
		return s
	}
	x := clusterIPs(t, k.createService(t, single("x")))[0]
	k.putSlice(t, "x", "x-v4", false, http, eps(kubeNode, a[0], a[1]))
	y := clusterIPs(t, k.createService(t, single("y")))[0]
	k.putSlice(t, "y", "y-v4", false, http, eps(kubeNode, a[2]))
	k.startSource(t)
	k.waitSynced(t)
	k.converge(t)
	k.requireServedBy(t, x, 80, 30, a[0], a[1])
	k.requireServedBy(t, y, 80, 10, a[2])

	// Down: the source and the engine stop (the datapath keeps serving
	// from the pinned maps), and the cluster changes.
	k.stopSource(t)
	require.NoError(t, k.engine.Close())
	k.putSlice(t, "x", "x-v4", false, http, eps(kubeNode, a[0], a[3]))
	k.deleteService(t, "y")
	k.deleteSlice(t, "y-v4")
	z := clusterIPs(t, k.createService(t, single("z")))[0]
	k.putSlice(t, "z", "z-v4", false, http, eps(kubeNode, a[4]))
	k.requireServedBy(t, x, 80, 30, a[0], a[1])

	// Back: the restored state serves while the source waits to apply.
	k.startEngine(t)
	k.startSource(t, sourceOpts{gated: true})
	select {
	case <-k.src.target.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the source made no call within 30s")
	}
	require.Equal(t, []string{"SyncSource"}, k.src.target.Calls(), "the first call is the full sync")
	k.requireServedBy(t, x, 80, 30, a[0], a[1])
	k.requireServedBy(t, y, 80, 10, a[2])
	k.requireRefused(t, z, 80, unreachable)
	require.Zero(t, k.writes(t), "nothing written before the full sync")

	k.src.release()
	k.waitSynced(t)
	k.converge(t)
	k.requireServedBy(t, x, 80, 30, a[0], a[3])
	k.requireRefused(t, y, 80, unreachable)
	k.requireServedBy(t, z, 80, 10, a[4])
	require.Empty(t, backendIDs(k.dump(t))[a[1].addr], "a[1] left the maps")
}

// The apiserver stops for 15s and comes back: traffic is unaffected
// throughout, nothing is written while it is down nor after the re-list
// (nothing changed), and a change made afterwards arrives.
func TestKubeAPIServerOutageChangesNothing(t *testing.T) {
	c := cluster.Start(t) // this test stops the apiserver: a cluster of its own
	k := newKubeEnv(t, c)
	a := k.pool(t, "a", false, 0, 3, 0)
	port := a[0].addr.Port()
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	ip := clusterIPs(t, k.createService(t, dualStack("web", tcpPort("http", 80))))[0]
	k.putSlice(t, "web", "web-v4", false, http, eps(kubeNode, a[:2]...))
	k.startSource(t)
	k.waitSynced(t)
	k.converge(t)
	k.settled(t)
	w0 := k.writes(t)
	ev0, err := k.src.counter("actorlb_k8s_events_total")
	require.NoError(t, err)

	const outage = 15 * time.Second
	wait := k.loop(t, ip, 80, outage+5*time.Second)
	require.NoError(t, c.StopAPIServer())
	stopped := time.Now()
	sawDisconnected := false
	for time.Since(stopped) < outage {
		require.Equal(t, w0, k.writes(t), "map writes while the apiserver is down")
		sawDisconnected = sawDisconnected || !k.src.src.Status().Connected
		time.Sleep(500 * time.Millisecond)
	}
	require.NoError(t, c.StartAPIServer(kctx(t)))
	restarted := time.Now()
	r := wait()
	require.Zero(t, r.Failed, "connects failed during the outage: %v", r.Errors)
	require.Len(t, r.Names, 2, "%v", r.Names)
	t.Logf("%d connects through the outage", r.OK)

	// client-go resumes the watches where they ended, or re-lists if the
	// apiserver no longer has their resource version; whatever it
	// replays of the unchanged objects writes nothing.
	time.Sleep(2 * time.Second)
	k.settled(t)
	require.Equal(t, w0, k.writes(t), "map writes after the apiserver came back (nothing changed)")
	ev1, err := k.src.counter("actorlb_k8s_events_total")
	require.NoError(t, err)
	t.Logf("%v events received from the outage to 2s after the restart (a re-list replays every object)", ev1-ev0)

	// A change after the outage arrives, within client-go's reflector
	// backoff (which grows to [30s, 60s) while the apiserver refuses).
	k.putSlice(t, "web", "web-v4", false, http, eps(kubeNode, a...))
	changed := time.Now()
	eventually(t, 90*time.Second, "the change after the outage", func() (bool, string) {
		s := k.service(t, frontend(ip, 80))
		return len(backendAddrs(s)) == 3, describe([]*lb.Service{s})
	})
	t.Logf("a change written %s after the restart took %s to reach the maps", changed.Sub(restarted).Round(time.Millisecond), time.Since(changed).Round(time.Millisecond))
	k.converge(t)
	k.requireServedBy(t, ip, 80, 60, a...)
	require.Greater(t, k.writes(t), w0)

	// client-go retries a refused watch without calling the watch error
	// handler: the source follows every list and watch call instead.
	assert.True(t, sawDisconnected, "Status().Connected stayed true while the apiserver was down for %s", outage)
}

// Ownership: an API-created service holds a frontend a Kubernetes service
// also wants: the Kubernetes one is a conflict (status and metric), the
// API one stays as it was; the source's full sync deletes no API service;
// a Kubernetes-owned service cannot be changed or deleted through the
// engine's API calls. Once the API service goes, the Kubernetes service
// gets its frontend at its next change.
func TestKubeOwnershipKeepsAPIAndKubernetesServicesApart(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "a", false, 0, 3, 0)
	port := a[0].addr.Port()
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	ext := netip.MustParseAddr("198.18.210.1")
	apiSvc := func(ip netip.Addr, be *echo) *lb.Service {
		return &lb.Service{Frontend: lb.Frontend{L3n4Addr: frontend(ip, 80)}, Backends: []lb.Backend{be.backend(lb.TCP, lb.BackendStateActive)}}
	}
	// Before the source: an API service on the external IP, another
	// elsewhere.
	extID, _, err := k.engine.Upsert(kctx(t), apiSvc(ext, a[0]))
	require.NoError(t, err)
	other := netip.MustParseAddr("198.18.211.1")
	otherID, _, err := k.engine.Upsert(kctx(t), apiSvc(other, a[0]))
	require.NoError(t, err)

	svc := dualStack("own", tcpPort("http", 80))
	svc.Spec.IPFamilyPolicy, svc.Spec.IPFamilies = nil, nil
	svc.Spec.ExternalIPs = []string{ext.String()}
	ip := clusterIPs(t, k.createService(t, svc))[0]
	k.putSlice(t, "own", "own-v4", false, http, eps(kubeNode, a[1:]...))
	k.startSource(t)
	k.waitSynced(t)
	k.waitService(t, frontend(ip, 80), "the ClusterIP", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 2 })

	// The conflict: reported, the API service untouched.
	eventually(t, 10*time.Second, "the conflict is reported", func() (bool, string) {
		st := k.src.src.Status()
		return len(st.Conflicts) == 1 && st.Conflicts[0].Frontend == frontend(ext, 80), fmt.Sprintf("%+v", st.Conflicts)
	})
	c := k.src.src.Status().Conflicts[0]
	require.Equal(t, k.ns+"/own", c.Service)
	t.Logf("conflict: %+v", c)
	g, err := k.src.gauge("actorlb_k8s_conflicts")
	require.NoError(t, err)
	require.EqualValues(t, 1, g)
	for _, x := range []struct {
		ip netip.Addr
		id lb.ServiceID
	}{{ext, extID}, {other, otherID}} {
		got := k.service(t, frontend(x.ip, 80))
		require.NotNil(t, got, "the full sync deleted API service %s", x.ip)
		require.Equal(t, lb.SourceAPI, got.Source)
		require.Equal(t, x.id, got.Frontend.ID)
		require.Equal(t, addrPorts(a[0]), backendAddrs(got))
		k.requireServedBy(t, x.ip, 80, 10, a[0])
	}
	k.requireServedBy(t, ip, 80, 30, a[1:]...)

	// The API cannot change or delete the Kubernetes service.
	ks := k.service(t, frontend(ip, 80))
	_, _, err = k.engine.Upsert(kctx(t), apiSvc(ip, a[0]))
	require.ErrorIs(t, err, actorlb.ErrFrontendOwned)
	require.ErrorContains(t, err, "kubernetes")
	require.ErrorIs(t, k.engine.Delete(kctx(t), ks.Frontend.ID), actorlb.ErrFrontendOwned)
	_, err = k.engine.DeleteByFrontend(kctx(t), frontend(ip, 80))
	require.ErrorIs(t, err, actorlb.ErrFrontendOwned)
	res, err := k.engine.DeleteBatch(kctx(t), []lb.L3n4Addr{frontend(ip, 80)})
	if err == nil {
		require.Len(t, res, 1)
		err = res[0].Err
	}
	require.ErrorIs(t, err, actorlb.ErrFrontendOwned)
	// The API's sync deletes its own services only.
	_, err = k.engine.Sync(kctx(t), nil)
	require.NoError(t, err)
	require.Equal(t, ks, k.service(t, frontend(ip, 80)), "the Kubernetes service is untouched")
	k.requireServedBy(t, ip, 80, 30, a[1:]...)
	require.Empty(t, k.owned(t, lb.SourceAPI), "the API's empty sync deleted its own services")

	// The API service is gone; the next change of the Kubernetes
	// service's objects (an endpoint added) takes the frontend.
	k.putSlice(t, "own", "own-v4", false, http, eps(kubeNode, a...))
	eventually(t, 10*time.Second, "the external IP, Kubernetes'", func() (bool, string) {
		s := k.service(t, frontend(ext, 80))
		return s != nil && s.Source == lb.SourceKubernetes && len(s.Backends) == 3,
			fmt.Sprintf("engine: %ssource: %+v; calls %v", describe([]*lb.Service{s}), k.src.src.Status(), k.src.target.Calls())
	})
	k.requireServedBy(t, ext, 80, 60, a...)
	eventually(t, 10*time.Second, "no conflict left", func() (bool, string) {
		st := k.src.src.Status()
		return len(st.Conflicts) == 0, fmt.Sprintf("%+v", st.Conflicts)
	})
	k.converge(t)
}

// proxierRules are the rules the source needs: list and watch of
// services, endpointslices and nodes (kube-proxy's, without get). The
// ClusterRole shipped in deploy/ replaces them when there is one.
var proxierRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
}

// deployedRules returns the rules of the ClusterRole in the repository's
// deploy/ YAML files, and the file; ok is false when none ships one.
func deployedRules(t testing.TB) (rules []rbacv1.PolicyRule, file string, ok bool) {
	t.Helper()
	dir, err := filepath.Abs("../../deploy")
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind != "ClusterRole" {
				continue
			}
			var cr rbacv1.ClusterRole
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &cr), "%s", f)
			require.False(t, ok, "more than one ClusterRole in deploy/ (%s and %s)", file, f)
			rules, file, ok = cr.Rules, f, true
		}
	}
	return rules, file, ok
}

// The source runs as a user bound only to the ClusterRole shipped in
// deploy/ (or, until there is one, list and watch on services,
// endpointslices and nodes): it needs no get, syncs, follows changes, and
// takes the node addresses for NodePort from the Node.
func TestKubeSourceNeedsOnlyListAndWatch(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	ctx := kctx(t)
	rules, file, ok := deployedRules(t)
	if ok {
		t.Logf("the ClusterRole of %s", file)
		for _, r := range rules {
			require.NotContains(t, r.Verbs, "get", "the shipped ClusterRole grants get: %+v", r)
		}
	} else {
		rules = proxierRules
		t.Logf("no ClusterRole in deploy/: list and watch of services, endpointslices, nodes")
	}
	rb := k.c.Client.RbacV1()
	name := "actorlb-e2e-" + k.ns
	_, err := rb.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rb.ClusterRoles().Delete(kctx(t), name, metav1.DeleteOptions{}) })
	_, err = rb.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "actorlb-agent"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rb.ClusterRoleBindings().Delete(kctx(t), name, metav1.DeleteOptions{}) })
	_, err = k.c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: kubeNode},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: nodeIPv4.String()}, {Type: corev1.NodeInternalIP, Address: nodeIPv6.String()},
			{Type: corev1.NodeHostName, Address: kubeNode},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.c.Client.CoreV1().Nodes().Delete(kctx(t), kubeNode, metav1.DeleteOptions{}) })

	agent, err := kubernetes.NewForConfig(k.c.AgentConfig)
	require.NoError(t, err)
	eventually(t, 10*time.Second, "the binding applies", func() (bool, string) {
		_, err := agent.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, fmt.Sprint(err)
	})
	_, err = agent.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.True(t, apierrors.IsForbidden(err), "the agent may not get a service: %v", err)

	a := k.pool(t, "a", false, 0, 2, 0)
	b := k.pool(t, "b", true, 0, 2, a[0].addr.Port())
	http := []discoveryv1.EndpointPort{slicePort("http", a[0].addr.Port())}
	np := dualStack("np", tcpPort("http", 80))
	np.Spec.Type = corev1.ServiceTypeNodePort
	s := k.createService(t, np)
	k.putSlice(t, "np", "np-v4", false, http, eps(kubeNode, a[:1]...))
	k.putSlice(t, "np", "np-v6", true, http, eps(kubeNode, b...))
	k.startSource(t, sourceOpts{client: agent, fromNode: true})
	st := k.waitSynced(t)
	require.True(t, st.Connected, "%+v", st)
	require.Empty(t, st.LastError, "no list/watch error")
	nodePort := uint16(s.Spec.Ports[0].NodePort)
	k.waitService(t, frontend(nodeIPv4, nodePort), "NodePort on the Node's InternalIP", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 1 })
	k.requireServedBy(t, nodeIPv4, nodePort, 10, a[0])
	k.requireServedBy(t, nodeIPv6, nodePort, 30, b...)
	k.putSlice(t, "np", "np-v4", false, http, eps(kubeNode, a...))
	k.waitService(t, frontend(nodeIPv4, nodePort), "a change", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 2 })
	k.requireServedBy(t, nodeIPv4, nodePort, 30, a...)
	k.converge(t)
	require.Empty(t, k.src.src.Status().LastError)
}
