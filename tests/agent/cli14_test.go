package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
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
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080,10.0.1.6:8080", "--type", "NodePort", "--weights", "100,50"))
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--backends", "10.0.1.5:8080,10.0.1.6:8080", "--states", "active,terminating"))
	get := func(id string) api.Service {
		t.Helper()
		var s api.Service
		require.NoError(t, json.Unmarshal([]byte(requireOK(t, a.cli(t, "service", "get", id, "-o", "json"))), &s))
		return s
	}
	s := get("1")
	require.Equal(t, "NodePort", s.Spec.Flags.Type, "--type left out: kept")
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
