package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/verify"
	"github.com/stretchr/testify/require"
)

func requireOK(t testing.TB, r cliResult) string {
	t.Helper()
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Empty(t, r.stderr)
	return r.stdout
}

func TestCLI(t *testing.T) {
	a := startAgent(t, "")

	// The quick start.
	out := requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	require.Equal(t, "Created service 1: 10.96.0.10:80/TCP with 1 backend\n", out)
	out = requireOK(t, a.bpf(t, "list"))
	require.Equal(t, `SERVICE ADDRESS     BACKEND ADDRESS (REVNAT_ID) (SLOT)
10.96.0.10:80/TCP   0.0.0.0:0 (1) (0) [ClusterIP; count 1, qcount 0]
                    10.0.1.5:8080/TCP (1) (1)
`, out)

	// Update with weights, states and type; a second and an IPv6 service.
	out = requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80",
		"--backends", "10.0.1.5:8080,10.0.1.6:8080", "--weights", "100,50", "--states", "active,quarantined", "--type", "HostPort"))
	require.Equal(t, "Updated service 1: 10.96.0.10:80/TCP with 2 backends\n", out)
	out = requireOK(t, a.cli(t, "service", "update", "--id", "2", "--frontend", "10.96.0.53:53/udp",
		"--backends", "10.0.1.7:53", "--backends", "10.0.1.8:53", "-o", "json"))
	var put struct {
		Created bool        `json:"created"`
		Service api.Service `json:"service"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &put))
	require.True(t, put.Created)
	require.Equal(t, "udp", put.Service.Spec.FrontendAddress.Protocol)
	require.Len(t, put.Service.Spec.BackendAddresses, 2)
	requireOK(t, a.cli(t, "service", "update", "--id", "3", "--frontend", "[fd00::a]:443", "--backends", "[fd00::1]:8443"))

	// List and get.
	out = requireOK(t, a.cli(t, "service", "list"))
	require.Equal(t, `ID   FRONTEND            TYPE        BACKEND
1    10.96.0.10:80/TCP   HostPort    1 => 10.0.1.5:8080 (active, weight 100)
                                     2 => 10.0.1.6:8080 (quarantined, weight 50)
2    10.96.0.53:53/UDP   ClusterIP   1 => 10.0.1.7:53 (active, weight 100)
                                     2 => 10.0.1.8:53 (active, weight 100)
3    [fd00::a]:443/TCP   ClusterIP   1 => [fd00::1]:8443 (active, weight 100)
`, out)
	var list []api.Service
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.cli(t, "service", "list", "-o", "json"))), &list))
	require.Len(t, list, 3)
	apiList, err := a.client.ListServices(ctxT(t))
	require.NoError(t, err)
	for i := range list {
		require.Equal(t, *apiList[i], list[i])
	}
	var one api.Service
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.cli(t, "service", "get", "1", "-o", "json"))), &one))
	require.Equal(t, list[0], one)
	require.Contains(t, requireOK(t, a.cli(t, "service", "get", "3")), "[fd00::a]:443/TCP")

	// bpf lb: the same raw content as the agent's /v1/lb/maps.
	var dump api.MapsDump
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.bpf(t, "list", "-o", "json"))), &dump))
	viaAPI, err := a.client.Maps(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, *viaAPI, dump)
	out = requireOK(t, a.bpf(t, "list"))
	require.Contains(t, out, "10.96.0.10:80/TCP   0.0.0.0:0 (1) (0) [HostPort; count 1, qcount 1]")
	require.Contains(t, out, "10.0.1.6:8080/TCP quarantined (1) (2)")
	require.Contains(t, out, "[fd00::a]:443/TCP   [::]:0 (3) (0) [ClusterIP; count 1, qcount 0]")

	out = requireOK(t, a.bpf(t, "revnat", "list"))
	require.Equal(t, `ID   FRONTEND ADDRESS   OWNER
1    10.96.0.10:80      service
2    10.96.0.53:53      service
3    [fd00::a]:443      service
`, out)
	var revs []api.RevNATEntry
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.bpf(t, "revnat", "list", "-o", "json"))), &revs))
	apiRevs, err := a.client.RevNAT(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, apiRevs, revs)

	require.Equal(t, "OK: 3 services, 5 backends, 3 revNAT entries; invariants 1-4 and 6-8 hold\n", requireOK(t, a.bpf(t, "verify")))
	var vj struct {
		OK         bool              `json:"ok"`
		Violations []json.RawMessage `json:"violations"`
	}
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.bpf(t, "verify", "-o", "json"))), &vj))
	require.True(t, vj.OK)
	require.Empty(t, vj.Violations)

	// Status.
	out = requireOK(t, a.cli(t, "status"))
	require.Contains(t, out, "Agent:          Ok (ready)")
	require.Contains(t, out, "Listening:      unix://"+a.socket)
	require.Contains(t, out, "Services:       3   Backends: 5   RevNAT entries: 3")
	require.Contains(t, out, "Restored:       0 services, 0 backends, 0 orphan revNAT entries deleted; 0 repairs (0 map writes)")
	require.Contains(t, out, "lb4_services        6         65536   0.01%")
	var st api.Status
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.cli(t, "status", "-o", "json"))), &st))
	require.True(t, st.Ready)
	require.Equal(t, 3, st.Services)

	// Errors: on stderr, non-zero exit, nothing on stdout.
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"service", "get", "9"}, 1, "actorlb: service 9 not found (list them with 'actorlb service list')\n"},
		{[]string{"service", "get", "0"}, 2, "actorlb: service get: invalid id \"0\": service ID must be between 1 and 65535\n"},
		{[]string{"service", "delete", "9"}, 1, "actorlb: service 9 not found (list them with 'actorlb service list')\n"},
		{[]string{"service", "update", "--id", "4", "--frontend", "10.96.0.10:70000"}, 2,
			"actorlb: service update: --frontend: invalid address \"10.96.0.10:70000\": port must be between 1 and 65535 (run 'actorlb service update --help')\n"},
		{[]string{"service", "update", "--id", "65536", "--frontend", "10.96.0.11:80"}, 2,
			"actorlb: service update: --id: invalid id \"65536\": service ID must be between 1 and 65535 (run 'actorlb service update --help')\n"},
		{[]string{"service", "update", "--id", "4", "--frontend", "10.96.0.11:80", "--backends", "10.0.1.1:1", "--weights", "1,2"}, 2,
			"actorlb: service update: --weights has 2 values for 1 backends (give one per backend) (run 'actorlb service update --help')\n"},
		{[]string{"service", "update", "--id", "4", "--frontend", "10.96.0.11:53/udp", "--backends", "10.0.1.1:53/tcp"}, 2,
			"actorlb: service update: --backends 10.0.1.1:53/tcp: protocol TCP differs from the frontend's UDP (backends take the frontend's protocol; leave it out) (run 'actorlb service update --help')\n"},
		{[]string{"service", "update", "--id", "4", "--frontend", "10.96.0.11:80", "--backends", "[fd00::1]:80"}, 1,
			"actorlb: put service 4: invalid --backends (backend 1) \"fd00::1\": IPv6 backend [fd00::1]:80 for IPv4 frontend 10.96.0.11:80\n"},
		{[]string{"service", "update", "--id", "4", "--frontend", "10.96.0.11:80", "--states", "gone", "--backends", "10.0.1.1:1"}, 2,
			"actorlb: service update: --states: invalid state \"gone\": must be one of active, terminating, quarantined, maintenance (run 'actorlb service update --help')\n"},
		{[]string{"service", "list", "-o", "xml"}, 2, "actorlb: invalid --output \"xml\": want table, wide, json or yaml\n"},
		{[]string{"service", "list", "--bogus"}, 2, "actorlb: service list: unknown flag: --bogus (run 'actorlb service list --help')\n"},
	} {
		r := a.cli(t, tc.args...)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.args, r.stderr)
		require.Equal(t, tc.stderr, r.stderr, "%v", tc.args)
		require.Empty(t, r.stdout, "%v", tc.args)
	}

	// Delete one, then all.
	require.Equal(t, "Deleted service 2\n", requireOK(t, a.cli(t, "service", "delete", "2")))
	out = requireOK(t, a.cli(t, "service", "delete", "--all", "-o", "json"))
	require.JSONEq(t, `{"deleted": [1, 3]}`, out)
	require.Equal(t, "Deleted 0 services\n", requireOK(t, a.cli(t, "service", "delete", "--all")))
	require.JSONEq(t, `[]`, requireOK(t, a.cli(t, "service", "list", "-o", "json")))
	d, err := verify.DumpPinned(a.root)
	require.NoError(t, err)
	require.Empty(t, d.Services4)
	require.Empty(t, d.Backends4)
	require.Empty(t, d.RevNAT4)
	require.Empty(t, d.Services6)
	require.Empty(t, d.Backends6)
	require.Empty(t, d.RevNAT6)
}

// commands lists every command path of the binary.
var commands = [][]string{
	{"agent"}, {"service", "list"}, {"service", "get"}, {"service", "update"}, {"service", "apply"}, {"service", "delete"},
	{"backend", "list"}, {"backend", "set-state"}, {"bpf", "lb", "list"}, {"bpf", "lb", "revnat", "list"}, {"bpf", "lb", "verify"}, {"status"}, {"version"},
}

// TestCLIApply: many services from one file, one line each; a failed one
// makes the exit status 1 and leaves the others applied.
func TestCLIApply(t *testing.T) {
	a := startAgent(t, "")
	file := filepath.Join(t.TempDir(), "services.json")
	require.NoError(t, os.WriteFile(file, []byte(`[
		{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]},
		{"id": 2, "frontend-address": {"ip": "10.96.0.11", "port": 80}, "backend-addresses": [{"ip": "10.0.1.6", "port": 0}]},
		{"id": 3, "frontend-address": {"ip": "fd00::a", "port": 443}}
	]`), 0o600))
	r := a.cli(t, "service", "apply", "--file", file)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "1    created")
	require.Contains(t, r.stdout, "3    created")
	require.Contains(t, r.stdout, "2    [1]: invalid backend-addresses[0].port")
	require.Contains(t, r.stderr, "service apply: 1 of 3 services failed")
	r = a.cli(t, "service", "apply", "-f", file, "-o", "json")
	require.Equal(t, 1, r.code, r.stderr)
	var results []struct {
		Result string `json:"result"`
		Code   int    `json:"code"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &results))
	require.Equal(t, []int{0, api.StatusInvalidBackend, 0}, []int{results[0].Code, results[1].Code, results[2].Code}, "applied again: only the failed one is sent")
	require.Equal(t, []string{"unchanged", "failed", "unchanged"}, []string{results[0].Result, results[1].Result, results[2].Result})
	list, err := a.client.ListServices(ctxT(t))
	require.NoError(t, err)
	require.Len(t, list, 2)
	r = a.cli(t, "service", "apply")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--file is required")
}

func TestHelp(t *testing.T) {
	for _, cmd := range commands {
		for _, flag := range []string{"--help", "-h"} {
			r := runCLI(t, append(cmd, flag)...)
			require.Equal(t, 0, r.code, "%v: %s", cmd, r.stderr)
			require.True(t, strings.HasPrefix(r.stdout, "Usage: actorlb "+strings.Join(cmd, " ")), "%v:\n%s", cmd, r.stdout)
			require.Contains(t, r.stdout, "\nExamples:\n  actorlb "+strings.Join(cmd, " "), "%v", cmd)
			require.Contains(t, r.stdout, "\nFlags:\n", "%v", cmd)
			require.Contains(t, r.stdout, "-h, --help", "%v", cmd)
		}
	}
	for _, group := range [][]string{{}, {"service"}, {"bpf"}, {"bpf", "lb"}, {"bpf", "lb", "revnat"}} {
		r := runCLI(t, append(group, "--help")...)
		require.Equal(t, 0, r.code, "%v", group)
		require.Contains(t, r.stdout, "Usage:\n  "+strings.Join(append([]string{"actorlb"}, group...), " ")+" COMMAND [flags]", "%v", group)
		require.Contains(t, r.stdout, "Commands:", "%v", group)
	}
	r := runCLI(t)
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "Quick start")

	r = runCLI(t, "servce", "list")
	require.Equal(t, 2, r.code)
	require.Equal(t, "actorlb: unknown command \"servce\" for \"actorlb\" (run 'actorlb --help')\n", r.stderr)
	r = runCLI(t, "bpf", "lb", "dump")
	require.Equal(t, 2, r.code)
	require.Equal(t, "actorlb: unknown command \"dump\" for \"actorlb bpf lb\" (run 'actorlb bpf lb --help')\n", r.stderr)
}

// TestCLIWithoutAgent: client commands say how to start the agent; bpf
// commands say where the maps are missing; nothing is created.
func TestCLIWithoutAgent(t *testing.T) {
	sock := shortDir(t) + "/none.sock"
	for _, args := range [][]string{{"service", "list"}, {"status"}, {"service", "delete", "--all"}} {
		r := runCLI(t, append(args, "-H", "unix://"+sock)...)
		require.Equal(t, 1, r.code, "%v", args)
		require.Contains(t, r.stderr, "agent unreachable at unix://"+sock, "%v", args)
		require.Contains(t, r.stderr, "(is the agent running? start it with 'actorlb agent', or point -H at it)", "%v", args)
	}
	r := runCLI(t, "status", "-H", "localhost:80")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `invalid host "localhost:80": want unix:///PATH or http://IP:PORT`)
	r = runCLI(t, "bpf", "lb", "list", "--bpf-root", shortDir(t))
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "map not pinned")
	require.Contains(t, r.stderr, "start one with 'actorlb agent --bpf-root")
}
