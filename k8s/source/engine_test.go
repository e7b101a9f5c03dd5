package source

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func newEngine(t *testing.T) *actorlb.Engine {
	t.Helper()
	root := testutil.PinDir(t)
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := actorlb.New(ctx, actorlb.Config{BPFRoot: root, Logger: logger, ReconcileInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// engineState lists the engine's services as "source render", sorted by
// frontend.
func engineState(t *testing.T, e *actorlb.Engine) []string {
	t.Helper()
	svcs, err := e.List(context.Background())
	require.NoError(t, err)
	slices.SortFunc(svcs, func(a, b *lb.Service) int { return a.Frontend.L3n4Addr.Compare(b.Frontend.L3n4Addr) })
	out := make([]string, len(svcs))
	for i, s := range svcs {
		slices.SortFunc(s.Backends, func(a, b lb.Backend) int { return a.L3n4Addr.Compare(b.L3n4Addr) })
		out[i] = s.Source.String() + " " + render(s)
	}
	return out
}

// The source against the real engine (kernel maps) through the façade:
// it owns its services, leaves the API's alone (a frontend the API holds
// is a conflict), and a second run after changes made while it was down
// deletes only its own services that are gone.
func TestSourceProgramsTheEngine(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	api, err := lb.ParseBackend("10.0.9.9:9090")
	require.NoError(t, err)
	_, _, err = e.Upsert(ctx, &lb.Service{Frontend: lb.Frontend{L3n4Addr: fe("10.96.0.9:80")}, Backends: []lb.Backend{api}})
	require.NoError(t, err)

	client := fake.NewClientset(
		service("ns", "web", "10.96.0.1"), slice("ns", "web-1", "web", "10.0.0.1"),
		service("ns", "old", "10.96.0.2"),
		service("ns", "clash", "10.96.0.9"),
	)
	h := start(t, client, e, nil)
	h.waitSynced(t)
	require.Equal(t, []string{
		"kubernetes ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)",
		"kubernetes ClusterIP 10.96.0.2:80/TCP ->",
		"api ClusterIP 10.96.0.9:80/TCP -> 10.0.9.9:9090/TCP(active)",
	}, engineState(t, e))
	st := h.src.Status()
	require.Len(t, st.Conflicts, 1)
	require.Equal(t, "ns/clash", st.Conflicts[0].Service)
	require.Equal(t, 2, st.Services)

	h.updateSlice(t, slice("ns", "web-1", "web", "10.0.0.1", "10.0.0.2"))
	require.Eventually(t, func() bool {
		return engineState(t, e)[0] == "kubernetes ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"
	}, 10*time.Second, 5*time.Millisecond)
	h.stop()

	// While the source is down: one service deleted, the clash resolved.
	require.NoError(t, client.CoreV1().Services("ns").Delete(ctx, "old", metav1.DeleteOptions{}))
	require.NoError(t, client.CoreV1().Services("ns").Delete(ctx, "clash", metav1.DeleteOptions{}))
	h = start(t, client, e, nil)
	h.waitSynced(t)
	require.Equal(t, []string{
		"kubernetes ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)",
		"api ClusterIP 10.96.0.9:80/TCP -> 10.0.9.9:9090/TCP(active)",
	}, engineState(t, e))
	require.Empty(t, h.src.Status().Conflicts)
}
