package agent_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/tests/kube/cluster"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The agent binary in Kubernetes mode, against a real apiserver: a
// Service and its EndpointSlice become a service of source kubernetes
// that the CLI lists with its namespace/name, status shows the source
// synced, the API may not delete it (409 naming the owner), and a restart
// of the agent keeps its ID.
func TestAgentInKubernetesModeProgramsTheClustersServices(t *testing.T) {
	testutil.Privileged(t)
	c := cluster.Start(t)
	ns := c.Namespace(t)
	ctx := ctxT(t)

	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	vip := svc.Spec.ClusterIP
	_, err = c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"198.18.7.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"198.18.7.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	root := testutil.PinDir(t)
	args := []string{"--k8s-kubeconfig", c.Kubeconfig, "--k8s-node-name", "node-a", "--node-addresses", "198.18.255.1"}
	a := launch(t, root, shortDir(t)+"/s.sock", args...)
	a.waitReady(t)
	id := waitKubeService(t, a, vip+":80", ns+"/web")
	out := a.cli(t, "service", "list")
	require.Contains(t, out.stdout, "SOURCE", "the SOURCE column appears once a service is not the API's")
	require.Contains(t, out.stdout, "198.18.7.1:8080")
	require.Contains(t, out.stdout, "198.18.7.2:8080")

	st := a.cli(t, "status")
	require.Zero(t, st.code, st.stderr)
	require.Contains(t, st.stdout, "Source kubernetes")
	require.Contains(t, st.stdout, "connected")
	require.Contains(t, st.stdout, "node node-a")
	require.NotContains(t, st.stdout, "not synced")

	del := a.cli(t, "service", "delete", strconv.Itoa(id))
	require.NotZero(t, del.code, "the API may not delete a Kubernetes service")
	require.Contains(t, del.stderr, "owned by kubernetes")
	require.Contains(t, del.stderr, "change or delete the Kubernetes Service instead")

	metrics := string(a.doString(t, "GET", "/metrics", "").body)
	for _, want := range []string{`actorlb_k8s_events_total{kind="endpointslice",op="add"} 1`, "actorlb_k8s_conflicts 0", "actorlb_network_programming_duration_seconds_count"} {
		require.True(t, strings.Contains(metrics, want), "/metrics has no %s", want)
	}

	// A restart keeps the service and its ID (restored from the pinned
	// maps with its source, then confirmed by the sync).
	require.Zero(t, a.signal(t, syscall.SIGTERM))
	b := launch(t, root, shortDir(t)+"/s.sock", args...)
	b.waitReady(t)
	require.Equal(t, id, waitKubeService(t, b, vip+":80", ns+"/web"))

	// The Service deleted in the cluster: gone from the agent.
	require.NoError(t, c.Client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	deadline := time.Now().Add(30 * time.Second)
	for strings.Contains(b.cli(t, "service", "list").stdout, vip+":80") {
		require.True(t, time.Now().Before(deadline), "the deleted Service's frontend is still listed")
		time.Sleep(100 * time.Millisecond)
	}
	require.Zero(t, b.signal(t, syscall.SIGTERM))
}

// waitKubeService waits until the agent lists frontend as a service of
// the Kubernetes service name (namespace/name) and returns its ID.
func waitKubeService(t *testing.T, a *agent, frontend, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		for _, line := range strings.Split(a.cli(t, "service", "list").stdout, "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && f[1] == frontend+"/TCP" && strings.Contains(line, "kubernetes "+name) {
				id, err := strconv.Atoi(f[0])
				require.NoError(t, err, line)
				return id
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s of %s not listed:\n%s\nstderr:\n%s", frontend, name, a.cli(t, "service", "list").stdout, a.stderr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
