package agent_test

import (
	"os"
	"path/filepath"
	"testing"

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
