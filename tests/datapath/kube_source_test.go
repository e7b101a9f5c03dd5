package datapath

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/k8s/source"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
)

// runningSource is a Kubernetes source running against the test's engine
// through a recordingTarget.
type runningSource struct {
	src    *source.Source
	reg    *prometheus.Registry
	target *recordingTarget
	cancel context.CancelFunc
	done   chan error
}

// sourceOpts tune startSource.
type sourceOpts struct {
	// client is the source's client (default: the admin's, with its own
	// connection).
	client kubernetes.Interface
	// fromNode: no NodeAddresses, the source reads the Node's InternalIPs.
	fromNode bool
	// gated: the target holds the source's calls until release is called.
	gated bool
	// resync is Config.ResyncInterval (0: the default).
	resync time.Duration
}

// recordingTarget is the engine as the source's target: it records the
// calls in order and can hold them until released.
type recordingTarget struct {
	eng *actorlb.Engine

	mu    sync.Mutex
	calls []string
	// gate, when not nil, is closed to let calls through; arrived is
	// closed when the first call waits at it.
	gate, arrived chan struct{}
	arrivedOnce   sync.Once
}

func (r *recordingTarget) record(ctx context.Context, call string) error {
	r.mu.Lock()
	r.calls = append(r.calls, call)
	gate := r.gate
	r.mu.Unlock()
	if gate == nil {
		return nil
	}
	r.arrivedOnce.Do(func() { close(r.arrived) })
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Calls returns the calls so far.
func (r *recordingTarget) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *recordingTarget) SyncSource(ctx context.Context, src lb.Source, desired []*lb.Service) (actorlb.SyncResult, error) {
	if err := r.record(ctx, "SyncSource"); err != nil {
		return actorlb.SyncResult{}, err
	}
	return r.eng.SyncSource(ctx, src, desired)
}

func (r *recordingTarget) UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]actorlb.UpsertResult, error) {
	if err := r.record(ctx, "UpsertBatch"); err != nil {
		return nil, err
	}
	return r.eng.UpsertBatch(ctx, svcs)
}

func (r *recordingTarget) DeleteBatchAs(ctx context.Context, src lb.Source, fes []lb.L3n4Addr) ([]actorlb.DeleteResult, error) {
	if err := r.record(ctx, "DeleteBatchAs"); err != nil {
		return nil, err
	}
	return r.eng.DeleteBatchAs(ctx, src, fes)
}

// startSource runs a Kubernetes source on the test's engine until
// stopSource (or the test's end).
func (k *kenv) startSource(t testing.TB, opts ...sourceOpts) {
	t.Helper()
	require.Nil(t, k.src, "a source runs already")
	var o sourceOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.client == nil {
		cl, err := kubernetes.NewForConfig(k.c.Config)
		require.NoError(t, err)
		o.client = cl
	}
	rt := &recordingTarget{eng: k.engine}
	if o.gated {
		rt.gate, rt.arrived = make(chan struct{}), make(chan struct{})
	}
	cfg := source.Config{
		Client:         o.client,
		NodeName:       kubeNode,
		NodeAddresses:  []netip.Addr{nodeIPv4, nodeIPv6},
		Target:         rt,
		Logger:         quietLogger(),
		Registerer:     prometheus.NewRegistry(),
		ResyncInterval: o.resync,
	}
	if o.fromNode {
		cfg.NodeAddresses = nil
	}
	src, err := source.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSource{src: src, reg: cfg.Registerer.(*prometheus.Registry), target: rt, cancel: cancel, done: make(chan error, 1)}
	go func() { rs.done <- src.Run(ctx) }()
	k.src = rs
}

// stopSource stops the source and waits until Run has returned.
func (k *kenv) stopSource(t testing.TB) {
	t.Helper()
	if k.src == nil {
		return
	}
	k.src.release()
	k.src.cancel()
	select {
	case err := <-k.src.done:
		require.NoError(t, err, "source Run")
	case <-time.After(30 * time.Second):
		t.Errorf("the source did not stop within 30s")
	}
	k.src = nil
}

// release lets a gated source's calls through.
func (rs *runningSource) release() {
	rt := rs.target
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.gate != nil {
		select {
		case <-rt.gate:
		default:
			close(rt.gate)
		}
	}
}

// waitSynced waits until the source has applied its full reconciliation.
func (k *kenv) waitSynced(t testing.TB) source.Status {
	t.Helper()
	var st source.Status
	eventually(t, 30*time.Second, "the source synced", func() (bool, string) {
		st = k.src.src.Status()
		return st.Synced, st.LastApplyError
	})
	return st
}

// gauge reads the value of metric name (no labels) from the source's
// registry.
func (rs *runningSource) gauge(name string) (float64, error) {
	mfs, err := rs.reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue(), nil
			}
		}
	}
	return 0, errors.New("no gauge " + name)
}

// counter sums the values of counter name (every label set) in the
// source's registry.
func (rs *runningSource) counter(name string) (float64, error) {
	mfs, err := rs.reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return sum, nil
	}
	return 0, errors.New("no counter " + name)
}
