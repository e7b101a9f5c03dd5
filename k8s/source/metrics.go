package source

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Event kinds and operations, the labels of actorlb_k8s_events_total.
const (
	KindService       = "service"
	KindEndpointSlice = "endpointslice"
	KindNode          = "node"

	OpAdd    = "add"
	OpUpdate = "update"
	OpDelete = "delete"
)

type metrics struct {
	events      *prometheus.CounterVec
	syncSeconds prometheus.Histogram
	conflicts   prometheus.Gauge
	programming prometheus.Histogram
	// events' children, looked up once.
	ev map[[2]string]prometheus.Counter
}

// latencyBuckets run from 1 ms (the source applies within milliseconds)
// to 5 minutes (Kubernetes' SLO for network programming is 30 s).
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actorlb_k8s_events_total",
			Help: "Kubernetes events received by the source, by kind (service, endpointslice, node) and operation (add, update, delete).",
		}, []string{"kind", "op"}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "actorlb_k8s_sync_duration_seconds",
			Help:    "Time the Kubernetes source took to apply a change to the engine (the full reconciliation after the informers synced, then each coalesced incremental change).",
			Buckets: latencyBuckets,
		}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "actorlb_k8s_conflicts",
			Help: "Frontends of Kubernetes services the source cannot program: held by another source or by another Kubernetes service.",
		}),
		programming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "actorlb_network_programming_duration_seconds",
			Help: "From a change of a Service or EndpointSlice (its endpoints.kubernetes.io/last-change-trigger-time annotation, else the event's receipt) " +
				"to the change being applied to the engine, as kube-proxy measures it.",
			Buckets: latencyBuckets,
		}),
		ev: map[[2]string]prometheus.Counter{},
	}
	for _, k := range []string{KindService, KindEndpointSlice, KindNode} {
		for _, op := range []string{OpAdd, OpUpdate, OpDelete} {
			m.ev[[2]string{k, op}] = m.events.WithLabelValues(k, op)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.syncSeconds, m.conflicts, m.programming} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("%w: Registerer: %w", ErrInvalidConfig, err)
			}
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) event(kind, op string) { m.ev[[2]string{kind, op}].Inc() }
