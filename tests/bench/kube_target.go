package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
)

// targetCall is one call of the Kubernetes source into the engine.
type targetCall struct {
	what       string // "sync", "upsert", "delete"
	n          int    // services or frontends in the call
	start, end time.Time
	cpu        time.Duration // the process's CPU time during the call
	cpuEnd     time.Duration // the process's CPU time so far at its end
}

// timedTarget is the engine as the source's target, recording when each
// call started and ended (the engine has answered once its map writes are
// done), and the desired set of the first full sync (not to be modified).
type timedTarget struct {
	e *actorlb.Engine

	mu          sync.Mutex
	calls       []targetCall
	firstSync   []*lb.Service
	haveDesired bool
}

func (t *timedTarget) record(what string, n int, start time.Time, cpu0 time.Duration) {
	end, cpuEnd := time.Now(), cpuTime()
	t.mu.Lock()
	t.calls = append(t.calls, targetCall{what: what, n: n, start: start, end: end, cpu: cpuEnd - cpu0, cpuEnd: cpuEnd})
	t.mu.Unlock()
}

func (t *timedTarget) SyncSource(ctx context.Context, src lb.Source, desired []*lb.Service) (actorlb.SyncResult, error) {
	t.mu.Lock()
	if !t.haveDesired {
		// The pointers only: the source keeps these services as its
		// applied state, so that the agent's memory is not inflated.
		t.haveDesired = true
		t.firstSync = slices.Clone(desired)
	}
	t.mu.Unlock()
	cpu0, start := cpuTime(), time.Now()
	r, err := t.e.SyncSource(ctx, src, desired)
	t.record("sync", len(desired), start, cpu0)
	return r, err
}

func (t *timedTarget) UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]actorlb.UpsertResult, error) {
	cpu0, start := cpuTime(), time.Now()
	r, err := t.e.UpsertBatch(ctx, svcs)
	t.record("upsert", len(svcs), start, cpu0)
	return r, err
}

func (t *timedTarget) DeleteBatchAs(ctx context.Context, src lb.Source, frontends []lb.L3n4Addr) ([]actorlb.DeleteResult, error) {
	cpu0, start := cpuTime(), time.Now()
	r, err := t.e.DeleteBatchAs(ctx, src, frontends)
	t.record("delete", len(frontends), start, cpu0)
	return r, err
}

// lastCallWithin returns the last call that started at or after from and
// ended at or before to.
func (t *timedTarget) lastCallWithin(from, to time.Time) (targetCall, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.calls) - 1; i >= 0; i-- {
		c := t.calls[i]
		if !c.start.Before(from) && !c.end.After(to) {
			return c, true
		}
	}
	return targetCall{}, false
}

func (t *timedTarget) snapshot() ([]targetCall, []*lb.Service) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]targetCall(nil), t.calls...), t.firstSync
}

// kubeProgress is what the bench reads of the source's status.
type kubeProgress struct {
	Synced             bool
	Services, Pending  int
	Conflicts          int
	LastApplyError     string
	ProgrammingSeconds histogramSum // actorlb_network_programming_duration_seconds
}

type histogramSum struct {
	Count uint64
	Sum   float64
}

// kubeSource is the Kubernetes source (k8s/source) as the bench drives it.
type kubeSource interface {
	Run(ctx context.Context) error
	progress() kubeProgress
}

type kubeSourceConfig struct {
	Client     kubernetes.Interface
	Target     *timedTarget
	Logger     logrus.FieldLogger
	Registerer *prometheus.Registry
}

// programmingHistogram reads actorlb_network_programming_duration_seconds
// from reg.
func programmingHistogram(reg *prometheus.Registry) histogramSum {
	mfs, err := reg.Gather()
	if err != nil {
		return histogramSum{}
	}
	for _, mf := range mfs {
		if mf.GetName() != "actorlb_network_programming_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				return histogramSum{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
			}
		}
	}
	return histogramSum{}
}
