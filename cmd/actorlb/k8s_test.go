package main

import (
	"bytes"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/actorlb/actorlb/api"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func parsedAgent(t *testing.T, args ...string) (*agentConfig, error) {
	t.Helper()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	agentCommand().flags(fs)
	require.NoError(t, fs.Parse(append([]string{"--dry-run"}, args...)))
	return agentFlags(&env{stdout: io.Discard, stderr: io.Discard, fs: fs})
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster: {server: "https://198.18.0.1:6443", insecure-skip-tls-verify: true}
  name: c
users:
- name: u
  user: {token: "t"}
contexts:
- context: {cluster: c, user: u}
  name: x
current-context: x
`

// Kubernetes mode: the kubeconfig is read when the flags are checked;
// without --node-addresses the Node's InternalIPs are used (nil), with it
// those; flags for another mode are refused naming them.
func TestAgentKubernetesFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(kubeconfig), 0o600))

	c, err := parsedAgent(t)
	require.NoError(t, err)
	require.Nil(t, c.k8s, "no Kubernetes mode by default")

	c, err = parsedAgent(t, "--k8s-kubeconfig", path, "--k8s-node-name", "node-a")
	require.NoError(t, err)
	require.NotNil(t, c.k8s)
	require.Equal(t, "node-a", c.k8s.nodeName)
	require.Equal(t, "https://198.18.0.1:6443", c.k8s.host)
	require.Nil(t, c.k8s.nodeAddrs, "the Node's InternalIPs")
	require.True(t, c.k8s.hugePages, "huge pages for the sync by default")

	c, err = parsedAgent(t, "--k8s-kubeconfig", path, "--node-addresses", "198.18.0.5")
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("198.18.0.5")}, c.k8s.nodeAddrs)
	require.NotEmpty(t, c.k8s.nodeName, "the host name by default")

	c, err = parsedAgent(t, "--k8s-kubeconfig", path, "--k8s-sync-huge-pages=false")
	require.NoError(t, err)
	require.False(t, c.k8s.hugePages)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--k8s-kubeconfig", path, "--k8s-in-cluster"}, "invalid --k8s-kubeconfig with --k8s-in-cluster"},
		{[]string{"--k8s-node-name", "x"}, "invalid --k8s-node-name: only for Kubernetes mode"},
		{[]string{"--k8s-sync-huge-pages=false"}, "invalid --k8s-sync-huge-pages: only for Kubernetes mode"},
		{[]string{"--k8s-kubeconfig", filepath.Join(t.TempDir(), "missing")}, "invalid --k8s-kubeconfig"},
		{[]string{"--k8s-kubeconfig", "/dev/null/x"}, "invalid --k8s-kubeconfig"},
	} {
		_, err := parsedAgent(t, tc.args...)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err = parsedAgent(t, "--k8s-in-cluster")
	require.ErrorContains(t, err, "invalid --k8s-in-cluster")
}

// service list shows a SOURCE column, with the Kubernetes service's
// namespace/name, when a service is not the API's; not otherwise.
func TestServiceListShowsTheSource(t *testing.T) {
	apiSvc := &api.Service{Spec: &api.ServiceSpec{ID: 1, FrontendAddress: &api.FrontendAddress{IP: "10.96.0.1", Port: 80, Protocol: "tcp"},
		Flags: &api.ServiceFlags{Type: "ClusterIP", Source: "api"}}}
	k8sSvc := &api.Service{Spec: &api.ServiceSpec{ID: 2, FrontendAddress: &api.FrontendAddress{IP: "10.96.0.2", Port: 80, Protocol: "tcp"},
		BackendAddresses: []api.BackendAddress{{IP: "10.0.0.1", Port: 8080, State: "active"}},
		Flags:            &api.ServiceFlags{Type: "ClusterIP", Source: "kubernetes", Namespace: "ns", Name: "web"}}}
	var b bytes.Buffer
	require.NoError(t, printServices(&b, []*api.Service{apiSvc}, false))
	require.NotContains(t, b.String(), "SOURCE")
	b.Reset()
	require.NoError(t, printServices(&b, []*api.Service{apiSvc, k8sSvc}, false))
	require.Equal(t, `ID   FRONTEND           TYPE        SOURCE              BACKEND
1    10.96.0.1:80/TCP   ClusterIP   api                 (none)
2    10.96.0.2:80/TCP   ClusterIP   kubernetes ns/web   1 => 10.0.0.1:8080 (active, weight 100)
`, b.String())
	b.Reset()
	require.NoError(t, printServices(&b, []*api.Service{apiSvc, k8sSvc}, true))
	require.Contains(t, b.String(), "SOURCE")
	require.Contains(t, b.String(), "kubernetes ns/web")
}

func TestStatusShowsTheSource(t *testing.T) {
	var b bytes.Buffer
	fs := pflag.NewFlagSet("status", pflag.ContinueOnError)
	statusCommand().flags(fs)
	printStatus(&env{stdout: &b, fs: fs}, &api.Status{State: "Ok", Ready: true, Services: 3,
		ServicesBySource: map[string]int{"api": 1, "kubernetes": 2},
		Sources: []api.SourceStatus{{Name: "kubernetes", Node: "node-a", NodeAddresses: []string{"198.18.0.1"}, Connected: true, Synced: true,
			LastEvent: "2026-01-02T03:04:05Z", Services: 2, Frontends: 2,
			Conflicts: []api.SourceConflict{{Frontend: "10.96.0.9:80/TCP", Service: "ns/clash", Reason: "another source owns the frontend"}}}}})
	out := b.String()
	require.Contains(t, out, "By source:      api 1, kubernetes 2\n")
	require.Contains(t, out, "Source kubernetes: connected, synced\n")
	require.Contains(t, out, "node node-a, node addresses 198.18.0.1; last event 2026-01-02T03:04:05Z")
	require.Contains(t, out, "conflict: 10.96.0.9:80/TCP of ns/clash: another source owns the frontend")
}
