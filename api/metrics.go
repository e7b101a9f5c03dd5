package api

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Operation results, the "result" label of actorlb_operations_total.
const (
	ResultOK       = "ok"
	ResultInvalid  = "invalid"
	ResultNotFound = "not_found"
	ResultError    = "error"
)

func resultOf(code int) string {
	switch {
	case code < 400:
		return ResultOK
	case code == http.StatusNotFound:
		return ResultNotFound
	case isInvalidCode(code) || code == http.StatusMethodNotAllowed:
		return ResultInvalid
	}
	return ResultError
}

// metrics holds the agent's Prometheus registry: operation counters and
// latencies observed by the handlers, and a collector that reads the
// engine's figures at every scrape.
type metrics struct {
	reg     *prometheus.Registry
	ops     *prometheus.CounterVec
	items   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actorlb_operations_total",
			Help: "API operations by kind (service_put, service_delete, ...) and result (ok, invalid, not_found, error).",
		}, []string{"operation", "result"}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actorlb_batch_items_total",
			Help: "Items of batch operations (PUT and DELETE /v1/services) by operation and result: a batch answered 200 counts each of its failed items here as a failure.",
		}, []string{"operation", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "actorlb_operation_duration_seconds",
			Help:    "Latency of API operations, from request to answer, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs .. 26s
		}, []string{"operation"}),
	}
	b := Build()
	buildInfo := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "actorlb_build_info",
		Help:        "Always 1; the labels say what the agent was built from (as 'actorlb version' does).",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "modified": strconv.FormatBool(b.Modified), "goversion": b.GoVersion},
	}, func() float64 { return 1 })
	m.reg.MustRegister(m.ops, m.items, m.latency, buildInfo, &engineCollector{s: s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(op string, code int, d time.Duration) {
	m.ops.WithLabelValues(op, resultOf(code)).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
}

// observeItems counts the items of a batch answer by their own result.
func (m *metrics) observeItems(op string, items []BatchResult) {
	for _, it := range items {
		m.items.WithLabelValues(op, resultOf(it.Code)).Inc()
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

var (
	descUp             = prometheus.NewDesc("actorlb_up", "1 when the engine has restored and serves, 0 otherwise.", nil, nil)
	descServices       = prometheus.NewDesc("actorlb_services", "Services in the engine's table.", nil, nil)
	descBackends       = prometheus.NewDesc("actorlb_backends", "Backends referenced by at least one service.", nil, nil)
	descRevNAT         = prometheus.NewDesc("actorlb_revnat_entries", "Reverse-NAT entries (of services and standalone).", nil, nil)
	descMapEntries     = prometheus.NewDesc("actorlb_map_entries", "Entries in each BPF map.", []string{"map"}, nil)
	descMapMax         = prometheus.NewDesc("actorlb_map_max_entries", "Capacity of each BPF map.", []string{"map"}, nil)
	descMapFill        = prometheus.NewDesc("actorlb_map_fill_ratio", "Entries divided by capacity, per BPF map.", []string{"map"}, nil)
	descMapWrites      = prometheus.NewDesc("actorlb_map_writes_total", "Entries written (op=update) and deleted (op=delete) per BPF map since start.", []string{"map", "op"}, nil)
	descRestarts       = prometheus.NewDesc("actorlb_actor_restarts_total", "Restarts of each actor since start.", []string{"actor"}, nil)
	descInFlight       = prometheus.NewDesc("actorlb_operations_in_flight", "Engine operations in flight.", nil, nil)
	descRestoreSvcs    = prometheus.NewDesc("actorlb_restore_services", "Services restored from the pinned maps at start.", nil, nil)
	descRestoreBes     = prometheus.NewDesc("actorlb_restore_backends", "Backends restored from the pinned maps at start.", nil, nil)
	descRestoreOrphans = prometheus.NewDesc("actorlb_restore_orphan_revnat", "Standalone revNAT entries found at restore.", nil, nil)
	descRestoreRepairs = prometheus.NewDesc("actorlb_restore_repairs", "Inconsistencies repaired at restore, by kind.", []string{"kind"}, nil)
	descRestoreWrites  = prometheus.NewDesc("actorlb_restore_writes", "Map entries written or deleted by the restore's repairs.", nil, nil)
	descSteps          = prometheus.NewDesc("actorlb_operation_steps_total", "Steps run by engine operations, by step name.", []string{"step"}, nil)
	descDrift          = prometheus.NewDesc("actorlb_drift_repairs_total", "Map entries and pins found changed behind the agent's back and repaired by reconciles, by map and kind (missing, changed, extra, pin).", []string{"map", "kind"}, nil)
	descPinOK          = prometheus.NewDesc("actorlb_map_pin_ok", "1 when the map's pin names the map the agent writes, 0 when it was removed or replaced.", []string{"map"}, nil)
	descReconciles     = prometheus.NewDesc("actorlb_reconciles_total", "Reconciles (drift checks of every map) run since start.", nil, nil)
	descUDPTerminated  = prometheus.NewDesc("actorlb_udp_sockets_terminated_total", "Connected UDP sockets closed because their backend left the service they reached it through.", nil, nil)
	descStepSeconds    = prometheus.NewDesc("actorlb_operation_step_seconds_total", "Time engine operations spent in each step (divide by actorlb_operation_steps_total for the mean).", []string{"step"}, nil)
)

// engineCollector reads the engine's stats and the maps' fill at scrape
// time.
type engineCollector struct{ s *Server }

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descServices, descBackends, descRevNAT, descMapEntries, descMapMax, descMapFill,
		descMapWrites, descRestarts, descInFlight, descRestoreSvcs, descRestoreBes, descRestoreOrphans, descRestoreRepairs, descRestoreWrites, descSteps, descStepSeconds, descDrift, descPinOK, descReconciles, descUDPTerminated} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.callTimeout)
	defer cancel()
	st, err := c.s.status(ctx)
	up := 0.0
	if err == nil && st.Ready {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descServices, float64(st.Services))
	gauge(descBackends, float64(st.Backends))
	gauge(descRevNAT, float64(st.RevNAT))
	gauge(descInFlight, float64(st.OpsInFlight))
	for name, t := range st.Steps {
		counter(descSteps, float64(t.Count), name)
		counter(descStepSeconds, t.Seconds, name)
	}
	for _, m := range st.Maps {
		gauge(descMapEntries, float64(m.Entries), m.Name)
		gauge(descMapMax, float64(m.MaxEntries), m.Name)
		gauge(descMapFill, m.Fill, m.Name)
		counter(descMapWrites, float64(m.Updated), m.Name, "update")
		counter(descMapWrites, float64(m.Deleted), m.Name, "delete")
		pinOK := 0.0
		if m.Pin == "ok" || m.Pin == "unpinned" {
			pinOK = 1
		}
		gauge(descPinOK, pinOK, m.Name)
		for _, kind := range []string{"missing", "changed", "extra", "pin"} {
			counter(descDrift, float64(st.Reconcile.Repairs[m.Name][kind]), m.Name, kind)
		}
	}
	counter(descReconciles, float64(st.Reconcile.Runs))
	counter(descUDPTerminated, float64(st.UDPSockets.Terminated))
	restarts := map[string]int{}
	for _, name := range actorlb.ActorNames {
		restarts[name] = 0 // every actor has a series, even before its first restart
	}
	for name, n := range st.ActorRestarts {
		restarts[name] = n
	}
	for _, name := range slices.Sorted(maps.Keys(restarts)) {
		counter(descRestarts, float64(restarts[name]), name)
	}
	r := st.Restore
	gauge(descRestoreSvcs, float64(r.Services))
	gauge(descRestoreBes, float64(r.Backends))
	gauge(descRestoreOrphans, float64(r.OrphanRevNAT))
	gauge(descRestoreWrites, float64(r.Writes))
	for _, kind := range slices.Sorted(maps.Keys(r.RepairsByKind)) {
		gauge(descRestoreRepairs, float64(r.RepairsByKind[kind]), kind)
	}
}
