package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/api"
	"github.com/stretchr/testify/require"
)

// writeFile writes content to a fresh file and returns its path.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// TestApplyIsStrict: a misspelled field is refused as the API refuses it,
// and nothing is applied.
func TestApplyIsStrict(t *testing.T) {
	a := startAgent(t, "")
	file := writeFile(t, "s.json", `[
		{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]},
		{"id": 2, "frontend-address": {"ip": "10.96.0.11", "port": 80}, "backend-adresses": [{"ip": "10.0.1.6", "port": 8080}]}
	]`)
	r := a.cli(t, "service", "apply", "-f", file)
	require.Equal(t, 2, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `invalid [1].backend-adresses: unknown field (known: id, frontend-address, backend-addresses`)
	require.Contains(t, r.stderr, "(nothing was applied)")
	list, err := a.client.ListServices(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, list)

	for body, want := range map[string]string{
		`{"id": 1}`:            "want a JSON array, got an object",
		`[{"id": 1, "id": 2}]`: "invalid [0].id: field given twice",
		`[{"id": "1"}]`:        `invalid [0].id "1": want an integer, got a string`,
		`[] []`:                "unexpected data after the JSON value",
	} {
		r := a.cli(t, "service", "apply", "-f", writeFile(t, "bad.json", body))
		require.Equal(t, 2, r.code, body)
		require.Contains(t, r.stderr, want, body)
	}
}

// TestUpdateIsNotDestructive: service update changes what is given and
// keeps the rest; re-running an earlier command does not reset states;
// backend set-state changes a backend in every service.
func TestUpdateIsNotDestructive(t *testing.T) {
	a := startAgent(t, "")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080,10.0.1.6:8080", "--type", "HostPort", "--weights", "100,50"))
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--backends", "10.0.1.5:8080,10.0.1.6:8080", "--states", "active,terminating"))
	get := func(id string) api.Service {
		t.Helper()
		var s api.Service
		require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.cli(t, "service", "get", id, "-o", "json"))), &s))
		return s
	}
	s := get("1")
	require.Equal(t, "HostPort", s.Spec.Flags.Type, "--type left out: kept")
	require.Len(t, s.Spec.BackendAddresses, 2)
	require.Equal(t, "terminating", s.Spec.BackendAddresses[1].State)
	require.EqualValues(t, 50, *s.Spec.BackendAddresses[1].Weight, "--weights left out: kept")

	// The first command again: the terminating backend stays terminating
	// (no "cannot change from terminating to active"), the type stays.
	out := requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080,10.0.1.6:8080"))
	require.Equal(t, "Updated service 1: 10.96.0.10:80/TCP with 2 backends\n", out)
	require.Equal(t, s, get("1"))
	requireOK(t, a.cli(t, "service", "update", "--id", "1"))
	require.Equal(t, s, get("1"), "no flag but --id: nothing changes")

	r := a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.99:80")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "service 1 has frontend 10.96.0.10:80/TCP, and a service's frontend never changes")
	r = a.cli(t, "service", "update", "--id", "5", "--backends", "10.0.1.5:8080")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--frontend is required to create service 5 (it does not exist)")

	// A second service with the same backend; backend list and set-state.
	requireOK(t, a.cli(t, "service", "update", "--id", "2", "--frontend", "10.96.0.11:80", "--backends", "10.0.1.5:8080"))
	require.Equal(t, `ADDRESS         STATE         SERVICES
10.0.1.5:8080   active        1,2
10.0.1.6:8080   terminating   1
`, requireOK(t, a.cli(t, "backend", "list")))
	require.Equal(t, "Backend 10.0.1.5:8080 is quarantined in 2 services (1,2): a backend's state is shared by every service that uses it\n",
		requireOK(t, a.cli(t, "backend", "set-state", "10.0.1.5:8080", "quarantined")))
	require.Equal(t, "quarantined", get("2").Spec.BackendAddresses[0].State)
	r = a.cli(t, "backend", "set-state", "10.0.1.6:8080", "active")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "service 1:")
	r = a.cli(t, "backend", "set-state", "10.9.9.9:1", "active")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no service uses backend 10.9.9.9:1")

	// A backend new to a service takes its shared state; '' clears.
	requireOK(t, a.cli(t, "service", "update", "--id", "3", "--frontend", "10.96.0.12:80", "--backends", "10.0.1.5:8080"))
	require.Equal(t, "quarantined", get("3").Spec.BackendAddresses[0].State)
	out = requireOK(t, a.cli(t, "service", "update", "--id", "2", "--backends", ""))
	require.Equal(t, "Updated service 2: 10.96.0.11:80/TCP with 0 backends\n", out)
	require.Empty(t, get("2").Spec.BackendAddresses)
}

// TestApplyPrune: --prune --dry-run prints the diff and changes nothing;
// --prune makes the agent's services the file's.
func TestApplyPrune(t *testing.T) {
	a := startAgent(t, "")
	for _, id := range []string{"1", "2", "3"} {
		requireOK(t, a.cli(t, "service", "update", "--id", id, "--frontend", "10.96.0."+id+":80", "--backends", "10.0.1.5:8080"))
	}
	file := writeFile(t, "s.json", `[
		{"id": 1, "frontend-address": {"ip": "10.96.0.1", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]},
		{"id": 2, "frontend-address": {"ip": "10.96.0.2", "port": 80}, "backend-addresses": [{"ip": "10.0.1.6", "port": 8080}]},
		{"id": 4, "frontend-address": {"ip": "10.96.0.4", "port": 80}}
	]`)
	out := requireOK(t, a.cli(t, "service", "apply", "-f", file, "--prune", "--dry-run"))
	require.Equal(t, `ID   RESULT
1    unchanged
2    updated
4    created
3    deleted
Dry run: 1 to create, 1 to update, 1 unchanged, 1 to delete; nothing was changed
`, out)
	list, err := a.client.ListServices(ctxT(t))
	require.NoError(t, err)
	require.Len(t, list, 3, "dry run: nothing changed")

	out = requireOK(t, a.cli(t, "service", "apply", "-f", file, "--prune"))
	require.Equal(t, "ID   RESULT\n1    unchanged\n2    updated\n4    created\n3    deleted\n", out)
	list, err = a.client.ListServices(ctxT(t))
	require.NoError(t, err)
	var ids []int64
	for _, s := range list {
		ids = append(ids, s.Spec.ID)
	}
	require.Equal(t, []int64{1, 2, 4}, ids)
	out = requireOK(t, a.cli(t, "service", "apply", "-f", file, "--prune"))
	require.Equal(t, "ID   RESULT\n1    unchanged\n2    unchanged\n4    unchanged\n", out, "applied again: nothing to do")
}

// TestApplyAtScale: 7000 services, far over the agent's 1 MiB body limit,
// go in chunks; plain progress lines off a terminal; delete --all is one
// batch call.
func TestApplyAtScale(t *testing.T) {
	a := startAgent(t, "")
	const n = 7000
	var specs []api.ServiceSpec
	for i := 1; i <= n; i++ {
		specs = append(specs, api.ServiceSpec{ID: int64(i),
			FrontendAddress:  &api.FrontendAddress{IP: fmt.Sprintf("10.%d.%d.%d", 96+i>>16, i>>8&255, i&255), Port: 80},
			BackendAddresses: []api.BackendAddress{{IP: fmt.Sprintf("10.1.%d.%d", i>>8&255, i&255), Port: 8080}}})
	}
	body, err := json.MarshalIndent(specs, "", "  ")
	require.NoError(t, err)
	require.Greater(t, len(body), api.DefaultMaxBodyBytes, "the file is over the agent's body limit")
	file := writeFile(t, "big.json", string(body))

	r := a.cli(t, "service", "apply", "-f", file, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rows []struct {
		ID     int64  `json:"id"`
		Result string `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
	require.Len(t, rows, n)
	for _, row := range rows {
		require.Equal(t, "created", row.Result, "service %d", row.ID)
	}
	require.Contains(t, r.stderr, fmt.Sprintf("service apply: %d of %d services\n", n, n), "plain progress lines off a terminal")
	require.GreaterOrEqual(t, strings.Count(r.stderr, "\n"), 2, "one line per chunk:\n%s", r.stderr)
	list, err := a.client.ListServices(ctxT(t))
	require.NoError(t, err)
	require.Len(t, list, n)

	out := requireOK(t, a.cli(t, "service", "apply", "-f", file, "-o", "json"))
	require.NotContains(t, out, `"created"`)
	require.NotContains(t, out, `"updated"`)

	r = a.cli(t, "service", "delete", "--all")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("Deleted %d services\n", n), r.stdout)
	// Batch calls of at most the agent's limit (1,000 IDs), not one call
	// per service.
	require.Equal(t, n/api.DefaultMaxBatchSpecs, strings.Count(r.stderr, "\n"), "one line per batch call:\n%s", r.stderr)
	require.Contains(t, r.stderr, fmt.Sprintf("service delete: %d of %d services\n", n, n))
	require.Equal(t, "OK: 0 services, 0 backends, 0 revNAT entries; invariants 1-4 and 6-8 hold\n", requireOK(t, a.bpf(t, "verify")))
}

// TestCiliumHabits: global flags before the command, -o in any case and
// yaml, list filters, bpf lb list --frontends/--backends/--revnat, and
// the pin directory from ACTORLB_BPF_ROOT or the running agent.
func TestCiliumHabits(t *testing.T) {
	a := startAgent(t, "")
	host := "unix://" + a.socket
	requireOK(t, runCLI(t, "-H", host, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	requireOK(t, runCLI(t, "--host="+host, "-o", "json", "service", "update", "--id", "2", "--frontend", "10.96.0.11:53/udp", "--backends", "10.0.1.6:53", "--type", "HostPort"))
	requireOK(t, runCLI(t, "service", "-H", host, "update", "--id", "3", "--frontend", "[fd00::a]:443", "--backends", "[fd00::1]:8443"))
	r := runCLI(t, "-H", host, "nope")
	require.Equal(t, 2, r.code)

	require.Equal(t, requireOK(t, a.cli(t, "service", "list", "-o", "json")), requireOK(t, a.cli(t, "service", "list", "-o", "JSON")))
	y := requireOK(t, a.cli(t, "service", "get", "2", "-o", "yaml"))
	require.Contains(t, y, "spec:\n")
	require.Contains(t, y, "frontend-address:\n")
	require.Contains(t, y, "    port: 53\n")
	wide := requireOK(t, a.cli(t, "service", "list", "-o", "Wide"))
	require.Contains(t, wide, "EXT-POLICY")
	require.Contains(t, wide, "2    10.96.0.11:53/UDP   HostPort")

	ids := func(args ...string) string {
		t.Helper()
		var svcs []api.Service
		require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.cli(t, append([]string{"service", "list", "-o", "json"}, args...)...))), &svcs))
		var out []string
		for _, s := range svcs {
			out = append(out, fmt.Sprint(s.Spec.ID))
		}
		return strings.Join(out, ",")
	}
	require.Equal(t, "1", ids("--frontend", "10.96.0.10:80"))
	require.Equal(t, "", ids("--frontend", "10.96.0.10:81"))
	require.Equal(t, "2", ids("--frontend", "10.96.0.11"))
	require.Equal(t, "3", ids("--frontend", "[fd00::a]:443"))
	require.Equal(t, "1", ids("--backend", "10.0.1.5:8080"))
	require.Equal(t, "3", ids("--backend", "fd00::1"))
	require.Equal(t, "2", ids("--type", "hostport"))
	require.Equal(t, "1,3", ids("--type", "ClusterIP"))
	r = a.cli(t, "service", "list", "--frontend", "10.96.0.10:99999")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "service list: --frontend:")

	require.Equal(t, `SERVICE ID   FRONTEND            OPTIONS     COUNT   QCOUNT
1            10.96.0.10:80/TCP   ClusterIP   1       0
2            10.96.0.11:53/UDP   HostPort    1       0
3            [fd00::a]:443/TCP   ClusterIP   1       0
`, requireOK(t, a.bpf(t, "list", "--frontends")))
	bes := requireOK(t, a.bpf(t, "list", "--backends"))
	require.Contains(t, bes, "BACKEND ID   ADDRESS")
	require.Contains(t, bes, "10.0.1.6:53/UDP")
	require.Contains(t, bes, "[fd00::1]:8443/TCP")
	require.Equal(t, requireOK(t, a.bpf(t, "revnat", "list")), requireOK(t, a.bpf(t, "list", "--revnat")))
	r = a.bpf(t, "list", "--revnat", "--backends")
	require.Equal(t, 2, r.code)

	// The pin directory without --bpf-root: the agent's, or the variable's.
	want := requireOK(t, a.bpf(t, "list"))
	require.Equal(t, want, requireOK(t, runCLI(t, "bpf", "lb", "list", "-H", host)), "learned from the agent")
	env := runCLIEnv(t, []string{"ACTORLB_BPF_ROOT=" + a.root}, "bpf", "lb", "list", "-H", "unix:///nonexistent.sock")
	require.Equal(t, want, requireOK(t, env))
}

// TestMessages: connection errors name the socket, not the client's URL;
// status shows the step timings only with --verbose; JSON logs give
// durations with their unit.
func TestMessages(t *testing.T) {
	sock := shortDir(t) + "/none.sock"
	r := runCLI(t, "service", "list", "-H", "unix://"+sock)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "dial unix "+sock)
	require.NotContains(t, r.stderr, "http://actorlb")

	a := startAgent(t, "", "--log-format", "json", "--log-level", "debug")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	require.NotContains(t, requireOK(t, a.cli(t, "status")), "OPERATION STEP")
	require.Contains(t, requireOK(t, a.cli(t, "status", "--verbose")), "OPERATION STEP")
	require.Regexp(t, `"duration":"[0-9.]+(µs|ms|s)"`, a.stderr.String())

	r = a.cli(t, "service", "update", "--id", "2", "--frontend", "10.96.0.11:80", "--backends", "10.0.1.1:1,[fd00::1]:80")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `invalid --backends (backend 2) "fd00::1"`)
}

// TestCompletionAndVersion: the completion scripts are generated and bash
// loads its one; version and --version say the same.
func TestCompletionAndVersion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		out := requireOK(t, runCLI(t, "completion", sh))
		require.Contains(t, out, "actorlb", sh)
	}
	if _, err := exec.LookPath("bash"); err == nil {
		cmd := exec.Command("bash", "-c", `source <("$ALB" completion bash) && complete -p actorlb`)
		cmd.Env = append(childEnv(), "ALB="+binary)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "actorlb")
	}
	v := requireOK(t, runCLI(t, "version"))
	require.Regexp(t, `^actorlb \S+, revision \S+.*, go1\.\d+`, v)
	require.Equal(t, strings.SplitN(v, "\n", 2)[0]+"\n", requireOK(t, runCLI(t, "--version")))
	var b api.BuildInfo
	require.NoError(t, json.Unmarshal([]byte(requireOK(t, runCLI(t, "version", "-o", "json"))), &b))
	require.Equal(t, runtime.Version(), b.GoVersion)
}

// TestCleanup: agent --cleanup refuses while an agent runs and without
// confirmation, then detaches and removes the pins.
func TestCleanup(t *testing.T) {
	a := startAgent(t, "")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	args := []string{"agent", "--cleanup", "--bpf-root", a.root, "--socket", a.socket}
	r := runCLI(t, append(args, "--yes")...)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "in use by another agent")
	a.stop(t)

	r = runCLI(t, args...) // standard input is empty: no answer
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "not confirmed: nothing removed")
	require.DirExists(t, a.root)

	out := requireOK(t, runCLI(t, append(args, "--yes")...))
	require.Contains(t, out, "Removed actorlb from this node")
	require.NoDirExists(t, a.root)
	require.NoFileExists(t, a.socket+".lock")
	require.Contains(t, requireOK(t, runCLI(t, append(args, "--yes")...)), "Nothing to clean up")
}

// TestHelpExamplesRun runs every example of every command's help (but the
// agent's, which start agents) against an agent: none is a usage error.
func TestHelpExamplesRun(t *testing.T) {
	a := startAgent(t, "")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "services.json"), []byte(
		`[{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]}]`), 0o600))
	ran := 0
	for _, cmd := range commands {
		if cmd[0] == "agent" {
			continue
		}
		help := requireOK(t, runCLI(t, append(cmd, "--help")...))
		_, ex, ok := strings.Cut(help, "\nExamples:\n")
		require.True(t, ok, "%v has examples", cmd)
		ex, _, _ = strings.Cut(ex, "\n\n")
		var lines []string
		for _, l := range strings.Split(ex, "\n") {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			if !strings.HasPrefix(l, "actorlb") && !strings.HasPrefix(l, "echo") && len(lines) > 0 {
				lines[len(lines)-1] += " " + l // a continued line
				continue
			}
			lines = append(lines, l)
		}
		for _, l := range lines {
			l, _, _ = strings.Cut(l, "  # ")
			l = strings.ReplaceAll(l, "-H http://127.0.0.1:8080", "")
			l = strings.ReplaceAll(l, "--bpf-root /sys/fs/bpf/test", "")
			script := `actorlb() { "$ALB" "$@"; }; set -o pipefail; ` + l
			if strings.Contains(l, "| jq") {
				script = `actorlb() { "$ALB" "$@"; }; jq() { cat >/dev/null; }; set -o pipefail; ` + l
			}
			c := exec.Command("bash", "-c", script)
			c.Dir = dir
			c.Env = append(childEnv(), "ALB="+binary, "ACTORLB_HOST=unix://"+a.socket, "ACTORLB_BPF_ROOT="+a.root)
			var errOut strings.Builder
			c.Stderr = &errOut
			err := c.Run()
			code := 0
			if err != nil {
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee, l)
				code = ee.ExitCode()
			}
			require.NotEqual(t, 2, code, "%s: %s", l, errOut.String())
			require.NotContains(t, errOut.String(), "unknown", l)
			ran++
		}
	}
	require.Greater(t, ran, 30)
}
