package actorlb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The actor library's dead-letter throttle lives up to one interval.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
		goleak.IgnoreTopFunction("time.Sleep"),
	)
	os.Exit(0)
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	l.SetOutput(os.Stderr)
	return l
}

// newEngine starts an engine on real maps pinned under root (a fresh bpffs
// directory when root is ""), closed when tb ends.
func newEngine(tb testing.TB, root string, cfg Config) *Engine {
	tb.Helper()
	if root == "" && !cfg.InMemory {
		root = testutil.PinDir(tb)
	}
	cfg.BPFRoot = root
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := New(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, e.Close()) })
	return e
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func mustService(tb testing.TB, fe string, backends ...string) *lb.Service {
	tb.Helper()
	a, err := lb.ParseL3n4Addr(fe)
	require.NoError(tb, err)
	svc := &lb.Service{Frontend: lb.Frontend{L3n4Addr: a}}
	for _, b := range backends {
		be, err := lb.ParseBackend(b)
		require.NoError(tb, err)
		svc.Backends = append(svc.Backends, be)
	}
	return svc
}

func TestUpsertGetDelete(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	id, created, err := e.Upsert(ctx, mustService(t, "10.96.0.10:80", "10.0.1.6:8080", "10.0.1.5:8080"))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, lb.ServiceID(1), id)
	got, err := e.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "10.0.1.5:8080/TCP", got.Backends[0].String())
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Services)
	require.Equal(t, 2, st.Backends)
	require.NoError(t, e.Delete(ctx, id))
	_, err = e.Get(ctx, id)
	require.ErrorIs(t, err, ErrServiceNotFound)
	for _, m := range []interface{ Dump() (any, error) }{} {
		_ = m
	}
	s4, err := e.Maps().Service4.Dump()
	require.NoError(t, err)
	require.Empty(t, s4)
	b4, err := e.Maps().Backend4.Dump()
	require.NoError(t, err)
	require.Empty(t, b4)
	r4, err := e.Maps().RevNAT4.Dump()
	require.NoError(t, err)
	require.Empty(t, r4)
}
