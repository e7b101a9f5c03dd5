package agent_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// A backend deleted behind the agent's back (as `bpftool map delete`
// does) is written again by `actorlb bpf lb reconcile` and counted in
// /metrics; the periodic reconcile does the same unasked.
func TestBackendDeletedBehindTheAgentsBackIsRepaired(t *testing.T) {
	a := startAgent(t, "", "--reconcile-interval", "0")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080,10.0.1.6:8080"))
	m, err := ebpf.LoadPinnedMap(filepath.Join(a.root, maps.Backend4Name), nil)
	require.NoError(t, err)
	defer m.Close()
	var key uint32
	require.NoError(t, m.NextKey(nil, &key))
	require.NoError(t, m.Delete(key))

	res := a.cli(t, "bpf", "lb", "reconcile", "-o", "json")
	requireOK(t, res)
	var ds []api.MapDrift
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &ds))
	require.Len(t, ds, 8) // the six, lb_members, lb_affinity_match
	require.Equal(t, api.MapDrift{Map: maps.Backend4Name, Pin: "ok", Missing: 1}, ds[1])
	var v [12]byte
	require.NoError(t, m.Lookup(key, &v), "the backend is back")
	require.Contains(t, string(a.doString(t, http.MethodGet, "/metrics", "").body),
		`actorlb_drift_repairs_total{kind="missing",map="lb4_backends"} 1`)
	res = a.cli(t, "bpf", "lb", "reconcile")
	requireOK(t, res)
	require.Contains(t, res.stdout, "0 drifts repaired")
}

func TestPeriodicReconcileRepairsWithinOneInterval(t *testing.T) {
	a := startAgent(t, "", "--reconcile-interval", "200ms")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	m, err := ebpf.LoadPinnedMap(filepath.Join(a.root, maps.Backend4Name), nil)
	require.NoError(t, err)
	defer m.Close()
	var key uint32
	require.NoError(t, m.NextKey(nil, &key))
	require.NoError(t, m.Delete(key))
	var v [12]byte
	require.Eventually(t, func() bool { return m.Lookup(key, &v) == nil }, 10*time.Second, 50*time.Millisecond)
}

// A pin removed under the running agent turns healthz to Warning at once,
// naming the map; the reconcile pins it again, healthz is Ok, and a
// restart finds every service (it used to find an empty map and delete
// the family's backends as orphans).
func TestPinRemovedUnderTheAgentIsReportedRepinnedAndSurvivesARestart(t *testing.T) {
	a := startAgent(t, "", "--reconcile-interval", "0")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	require.NoError(t, os.Remove(filepath.Join(a.root, maps.Service4Name)))

	var st api.Status
	r := a.doString(t, http.MethodGet, "/v1/healthz", "")
	require.Equal(t, http.StatusOK, r.code)
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Equal(t, "Warning", st.State)
	require.Contains(t, st.Msg, "pin of lb4_services is missing")

	requireOK(t, a.cli(t, "bpf", "lb", "reconcile"))
	r = a.doString(t, http.MethodGet, "/v1/healthz", "")
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Equal(t, "Ok", st.State, st.Msg)

	root := a.root
	a.stop(t)
	b := startAgent(t, root, "--reconcile-interval", "0")
	res := b.cli(t, "service", "list", "-o", "json")
	requireOK(t, res)
	require.Contains(t, res.stdout, "10.96.0.10")
}

// An agent started on a root whose lb4_services pin vanished while its
// backends remain refuses to start and says why and what to do; nothing
// is changed.
func TestAgentRefusesToStartWhenAServiceMapVanished(t *testing.T) {
	a := startAgent(t, "", "--reconcile-interval", "0")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	root := a.root
	a.stop(t)
	require.NoError(t, os.Remove(filepath.Join(root, maps.Service4Name)))
	res := runCLI(t, "agent", "--bpf-root", root, "--socket", filepath.Join(shortDir(t), "s.sock"), "--socket-lb=false")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "lb4_services is not pinned under "+root+" while lb4_backends and lb4_reverse_nat still hold entries")
	require.Contains(t, res.stderr, "to accept the loss, pass --recreate-maps")
	_, err := os.Stat(filepath.Join(root, maps.Service4Name))
	require.ErrorIs(t, err, os.ErrNotExist)
}
