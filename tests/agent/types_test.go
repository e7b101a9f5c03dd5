package agent_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	"github.com/stretchr/testify/require"
)

// nodeAgentFlags give the agent fixed node addresses: the tests do not
// depend on the host's.
var nodeAgentFlags = []string{"--node-addresses", "127.0.0.1,192.0.2.1,::1", "--node-port-range", "30000-32767"}

func getSpec(t *testing.T, a *agent, id int) *api.Service {
	t.Helper()
	r := a.doString(t, "GET", fmt.Sprintf("/v1/service/%d", id), "")
	require.Equal(t, http.StatusOK, r.code, string(r.body))
	var s api.Service
	require.NoError(t, api.DecodeStrict(r.body, &s))
	return &s
}

// mapsNow returns the agent's maps as it reads them.
func mapsNow(t *testing.T, a *agent) string {
	t.Helper()
	r := a.doString(t, "GET", "/v1/lb/maps", "")
	require.Equal(t, http.StatusOK, r.code)
	return string(r.body)
}

// TestEveryServiceTypeViaRESTAndCLIReadsBack: each type with its policies,
// affinity, weights and node-local backends, created through the REST API
// and the CLI, reads back as written; bpf lb list shows them.
func TestEveryServiceTypeViaRESTAndCLIReadsBack(t *testing.T) {
	testutil.Privileged(t)
	a := startAgent(t, "", nodeAgentFlags...)

	cfg := a.doString(t, "GET", "/v1/config", "")
	require.Equal(t, http.StatusOK, cfg.code)
	var c api.DaemonConfiguration
	require.NoError(t, api.DecodeStrict(cfg.body, &c))
	require.Equal(t, []string{"127.0.0.1", "192.0.2.1", "::1"}, c.Status.NodeAddresses)
	require.Equal(t, "30000-32767", c.Status.NodePortRange)

	specs := map[int]string{
		1: `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}], "flags": {"type": "ClusterIP", "intTrafficPolicy": "Local"}}`,
		2: `{"frontend-address": {"ip": "127.0.0.1", "port": 30080}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080, "nodeLocal": true}, {"ip": "10.0.1.6", "port": 8080}], "flags": {"type": "NodePort", "extTrafficPolicy": "Local"}}`,
		3: `{"frontend-address": {"ip": "198.51.100.7", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080, "weight": 300}, {"ip": "10.0.1.6", "port": 8080, "weight": 100}], "flags": {"type": "ExternalIPs", "sessionAffinity": true, "sessionAffinityTimeout": 16777215}}`,
		4: `{"frontend-address": {"ip": "192.0.2.80", "port": 443}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8443, "nodeLocal": true}], "flags": {"type": "LoadBalancer", "trafficPolicy": "Local", "intTrafficPolicy": "Local"}}`,
		5: `{"frontend-address": {"ip": "192.0.2.1", "port": 8080}, "backend-addresses": [{"ip": "10.0.1.7", "port": 80}], "flags": {"type": "HostPort"}}`,
		6: `{"frontend-address": {"ip": "169.254.169.254", "port": 80}, "backend-addresses": [{"ip": "10.0.1.8", "port": 8080}], "flags": {"type": "LocalRedirect"}}`,
	}
	for id := 1; id <= len(specs); id++ {
		r := a.doString(t, "PUT", fmt.Sprintf("/v1/service/%d", id), specs[id])
		require.Equal(t, http.StatusCreated, r.code, "%d: %s", id, r.body)
	}
	s := getSpec(t, a, 1)
	require.Equal(t, [3]string{"ClusterIP", "Cluster", "Local"}, [3]string{s.Spec.Flags.Type, s.Spec.Flags.ExtTrafficPolicy, s.Spec.Flags.IntTrafficPolicy})
	s = getSpec(t, a, 2)
	require.Equal(t, "NodePort", s.Spec.Flags.Type)
	require.Equal(t, "Local", s.Spec.Flags.ExtTrafficPolicy)
	require.True(t, s.Spec.BackendAddresses[0].NodeLocal)
	require.False(t, s.Spec.BackendAddresses[1].NodeLocal)
	s = getSpec(t, a, 3)
	require.True(t, s.Spec.Flags.SessionAffinity)
	require.Equal(t, uint32(16777215), s.Spec.Flags.SessionAffinityTimeout)
	require.EqualValues(t, 300, *s.Spec.BackendAddresses[0].Weight)
	s = getSpec(t, a, 4)
	require.Equal(t, [2]string{"Local", "Local"}, [2]string{s.Spec.Flags.ExtTrafficPolicy, s.Spec.Flags.IntTrafficPolicy})
	require.Equal(t, "HostPort", getSpec(t, a, 5).Spec.Flags.Type)
	require.Equal(t, "LocalRedirect", getSpec(t, a, 6).Spec.Flags.Type)

	// The CLI: a NodePort over every node address, a LoadBalancer with
	// options, and a maglev service that is warned about.
	r := a.cli(t, "service", "create", "--id", "10", "--type", "NodePort", "--node-port", "30081", "--backends", "10.0.1.5:8080,10.0.1.6:8080",
		"--weights", "10.0.1.5:8080=300", "--node-local", "10.0.1.6:8080", "--int-traffic-policy", "Local")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, `Created 3 services for node port 30081 (the surrogate and 2 node addresses the agent reports), each with 2 backends:
  service 10: 0.0.0.0:30081/TCP
  service 11: 127.0.0.1:30081/TCP
  service 12: 192.0.2.1:30081/TCP
`, r.stdout)
	for id := 10; id <= 12; id++ {
		s := getSpec(t, a, id)
		require.Equal(t, "NodePort", s.Spec.Flags.Type)
		require.Equal(t, "Local", s.Spec.Flags.IntTrafficPolicy)
		require.EqualValues(t, 300, *s.Spec.BackendAddresses[0].Weight)
		require.True(t, s.Spec.BackendAddresses[1].NodeLocal)
	}
	r = a.cli(t, "service", "create", "--id", "20", "--type", "NodePort", "--node-port", "30082/udp", "--backends", "[fd00::5]:53")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "service 20: [::]:30082/UDP\n  service 21: [::1]:30082/UDP\n")

	r = a.cli(t, "service", "create", "--id", "30", "--frontend", "192.0.2.90:80", "--type", "LoadBalancer", "--backends", "10.0.1.9:80",
		"--ext-traffic-policy", "Local", "--node-local", "10.0.1.9:80", "--affinity-timeout", "600", "--lb-algorithm", "maglev")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "Created service 30: 192.0.2.90:80/TCP with 1 backend\n", r.stdout)
	require.Contains(t, r.stderr, "warning: service 30: lbAlgorithm maglev is stored in the service map but has no effect on the socket LB yet")
	s = getSpec(t, a, 30)
	require.Equal(t, []string{api.MaglevWarning}, s.Status.Warnings)
	require.Equal(t, uint32(600), s.Spec.Flags.SessionAffinityTimeout)

	// update keeps what it is not told: affinity off, the rest stays.
	r = a.cli(t, "service", "update", "--id", "30", "--affinity-timeout", "0")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "no effect on the socket LB", "still maglev: still warned")
	s = getSpec(t, a, 30)
	require.False(t, s.Spec.Flags.SessionAffinity)
	require.Equal(t, "Local", s.Spec.Flags.ExtTrafficPolicy)
	require.True(t, s.Spec.BackendAddresses[0].NodeLocal)

	r = a.cli(t, "service", "create", "--id", "30", "--frontend", "192.0.2.91:80")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "service 30 exists (192.0.2.90:80/TCP): nothing created")

	wide := requireOK(t, a.cli(t, "service", "list", "-o", "wide"))
	require.Contains(t, wide, "SCOPE")
	require.Contains(t, wide, "(active, weight 300)")
	require.Contains(t, wide, "(active, weight 100, node-local)")
	require.Contains(t, wide, "maglev (ignored by the socket LB)")

	list := requireOK(t, a.bpf(t, "list"))
	require.Contains(t, list, "[NodePort, int-local, two-scopes, non-routable;")
	require.Contains(t, list, "[NodePort, ext-local, two-scopes;")
	require.Contains(t, list, "two-scopes")
	require.Contains(t, list, "[weight 300]")
	require.Contains(t, list, "[node-local]")
	require.Contains(t, list, "affinity 16777215s")
	require.Contains(t, list, "10.96.0.10:80/TCP")

	// A maintenance backend has no slot: lb_members records that it belongs.
	r7 := a.doString(t, "PUT", "/v1/service/7", `{"frontend-address": {"ip": "10.96.0.17", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}, {"ip": "10.0.1.11", "port": 8080, "state": "maintenance"}]}`)
	require.Equal(t, http.StatusCreated, r7.code, string(r7.body))

	// SIGKILL, then a new agent on the same maps: every type, flag,
	// scope, affinity timeout, weight, node-local flag and maintenance
	// backend comes back as it was, with no map written, and the maps
	// verify clean.
	before := a.doString(t, "GET", "/v1/service", "")
	require.Equal(t, http.StatusOK, before.code)
	require.Contains(t, string(before.body), `"maintenance"`)
	require.NoError(t, a.cmd.Process.Kill())
	<-a.done
	a.stopped = true
	b := startAgent(t, a.root, nodeAgentFlags...)
	after := b.doString(t, "GET", "/v1/service", "")
	require.Equal(t, http.StatusOK, after.code)
	require.JSONEq(t, string(before.body), string(after.body), "services after the SIGKILL")
	h := b.doString(t, "GET", "/v1/healthz", "")
	var st api.Status
	require.NoError(t, json.Unmarshal(h.body, &st))
	require.Zero(t, st.Restore.Repairs, "%v", st.Restore.RepairsByKind)
	require.Zero(t, st.Restore.Writes, "a warm restart writes nothing")
	for _, m := range st.Maps {
		require.Zero(t, m.Updated+m.Deleted, "%s written by the restart", m.Name)
	}
	pinned, err := verify.DumpPinned(a.root)
	require.NoError(t, err)
	require.NotEmpty(t, pinned.Members)
	require.NotEmpty(t, pinned.AffinityMatch)
	require.Empty(t, verify.Check(pinned))
}

// TestBadTypesAndOptionsAreRefusedAndChangeNothing: each refusal names
// the field, and the maps are as before.
func TestBadTypesAndOptionsAreRefusedAndChangeNothing(t *testing.T) {
	testutil.Privileged(t)
	a := startAgent(t, "", nodeAgentFlags...)
	requireOK(t, a.cli(t, "service", "create", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	before := mapsNow(t, a)

	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"node port below the range", `{"frontend-address": {"ip": "127.0.0.1", "port": 8080}, "flags": {"type": "NodePort"}}`,
			api.StatusInvalidFrontend, `invalid frontend-address.port \"8080\": a NodePort frontend's port must be in the agent's node port range 30000-32767 (pick a port in it, or start the agent with another --node-port-range)`},
		{"node port on a VIP", `{"frontend-address": {"ip": "10.96.0.11", "port": 30080}, "flags": {"type": "NodePort"}}`,
			api.StatusInvalidFrontend, `invalid frontend-address.ip \"10.96.0.11\": a NodePort frontend must be the surrogate 0.0.0.0 or one of the node's addresses (the node addresses are 127.0.0.1, 192.0.2.1)`},
		{"Local on ClusterIP", `{"frontend-address": {"ip": "10.96.0.12", "port": 80}, "flags": {"extTrafficPolicy": "Local"}}`,
			http.StatusBadRequest, `invalid flags.extTrafficPolicy \"Local\": a ClusterIP service is reached only from inside the node`},
		{"weight 65536", `{"frontend-address": {"ip": "10.96.0.12", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080, "weight": 65536}]}`,
			api.StatusInvalidBackend, `invalid backend-addresses[0].weight \"65536\": want an integer between 0 and 65535`},
		{"affinity timeout 16777216", `{"frontend-address": {"ip": "10.96.0.12", "port": 80}, "flags": {"sessionAffinity": true, "sessionAffinityTimeout": 16777216}}`,
			http.StatusBadRequest, `invalid flags.sessionAffinityTimeout \"16777216\": timeout must be at most 16777215 seconds`},
	} {
		r := a.doString(t, "PUT", "/v1/service/2", tc.body)
		require.Equal(t, tc.code, r.code, "%s: %s", tc.name, r.body)
		require.Contains(t, string(r.body), tc.want, tc.name)
	}
	r := a.doString(t, "PUT", "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}], "flags": {"extTrafficPolicy": "Local"}}`)
	require.Equal(t, http.StatusBadRequest, r.code, "an update of an existing service too")
	require.Equal(t, before, mapsNow(t, a), "nothing changed")

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"service", "create", "--id", "5", "--type", "NodePort", "--node-port", "8080", "--backends", "10.0.1.5:8080"}, 1,
			"invalid --node-port \"8080\": a NodePort frontend's port must be in the agent's node port range 30000-32767 (pick a port in it, or start the agent with another --node-port-range)"},
		{[]string{"service", "create", "--id", "5", "--type", "NodePort", "--frontend", "10.96.0.13:30080"}, 1,
			"add the address to the agent's --node-addresses"},
		{[]string{"service", "update", "--id", "1", "--ext-traffic-policy", "Local"}, 1,
			`invalid --ext-traffic-policy "Local": a ClusterIP service is reached only from inside the node`},
		{[]string{"service", "update", "--id", "1", "--weights", "65536"}, 2, `--weights: invalid weight "65536": weight must be between 0 and 65535`},
		{[]string{"service", "update", "--id", "1", "--affinity-timeout", "16777216"}, 2, `invalid session-affinity-timeout "16777216"`},
		{[]string{"service", "create", "--id", "65535", "--type", "NodePort", "--node-port", "30080"}, 2, "need IDs 65535..65537, above 65535"},
		{[]string{"service", "create", "--id", "5", "--node-port", "30080"}, 2, "--node-port needs --type NodePort"},
	} {
		r := a.cli(t, tc.args...)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
	require.Equal(t, before, mapsNow(t, a), "nothing changed")

	// A NodePort create whose IDs are not all free (the third is taken)
	// creates none of its services.
	requireOK(t, a.cli(t, "service", "create", "--id", "42", "--frontend", "10.96.0.42:80"))
	before = mapsNow(t, a)
	cr := a.cli(t, "service", "create", "--id", "40", "--type", "NodePort", "--node-port", "30090")
	require.Equal(t, 1, cr.code)
	require.Contains(t, cr.stderr, "service 42 exists (10.96.0.42:80/TCP): nothing created")
	require.Equal(t, before, mapsNow(t, a))
	require.False(t, strings.Contains(mapsNow(t, a), `"dport":30090`))
	var svcs []api.Service
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.cli(t, "service", "list", "-o", "json"))), &svcs))
	require.Len(t, svcs, 2)
}
