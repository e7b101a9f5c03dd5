package main

import (
	"context"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the conntrack GC, read from its stats at every scrape.
var (
	descCTEntries  = prometheus.NewDesc("actorlb_conntrack_entries", "Entries of each conntrack map kept by its last complete GC pass (map: lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev).", []string{"family", "map"}, nil)
	descCTFlows    = prometheus.NewDesc("actorlb_conntrack_flows", "Forward conntrack entries (flows) kept by the last complete GC pass, by protocol (tcp, udp, other).", []string{"family", "proto"}, nil)
	descCTDeleted  = prometheus.NewDesc("actorlb_conntrack_deleted_total", "Conntrack entries deleted by the GC, by reason: expired (the flow's lifetime passed; forward entry and its reverse partner) or orphan (a reverse entry whose forward entry is gone).", []string{"family", "reason"}, nil)
	descCTScanned  = prometheus.NewDesc("actorlb_conntrack_scanned_total", "Conntrack entries read by the GC.", []string{"family", "map"}, nil)
	descCTPresent  = prometheus.NewDesc("actorlb_conntrack_map_present", "1 when the conntrack map is pinned with the expected shape (the packet datapath is attached), 0 otherwise.", []string{"map"}, nil)
	descCTIdle     = prometheus.NewDesc("actorlb_conntrack_gc_idle", "1 when no conntrack map is pinned and the GC idles.", nil, nil)
	descCTPasses   = prometheus.NewDesc("actorlb_conntrack_gc_passes_total", "Complete GC passes over the conntrack maps.", nil, nil)
	descCTLastPass = prometheus.NewDesc("actorlb_conntrack_gc_last_pass_seconds", "Duration of the last complete GC pass, from its first tick to its last.", nil, nil)
	descCTErrors   = prometheus.NewDesc("actorlb_conntrack_gc_errors_total", "GC ticks that failed (the maps' errors; the next pass tries again).", nil, nil)
)

// conntrackCollector exports the GC's stats.
type conntrackCollector struct {
	gc      *actorlb.ConntrackGC
	timeout time.Duration
}

func (c *conntrackCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCTEntries, descCTFlows, descCTDeleted, descCTScanned, descCTPresent, descCTIdle, descCTPasses, descCTLastPass, descCTErrors} {
		ch <- d
	}
}

func (c *conntrackCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.gc.Stats(ctx)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	deleted := map[string][2]uint64{}
	flows := map[string][3]int{}
	for _, m := range st.Maps {
		gauge(descCTEntries, float64(m.Entries), m.Family, m.Name)
		counter(descCTScanned, float64(m.Scanned), m.Family, m.Name)
		present := 0.0
		if m.Present {
			present = 1
		}
		gauge(descCTPresent, present, m.Name)
		d := deleted[m.Family]
		d[0] += m.DeletedExpired
		d[1] += m.DeletedOrphans
		deleted[m.Family] = d
		if !m.Reverse {
			flows[m.Family] = [3]int{m.TCP, m.UDP, m.Other}
		}
	}
	for _, fam := range []string{"ipv4", "ipv6"} {
		counter(descCTDeleted, float64(deleted[fam][0]), fam, "expired")
		counter(descCTDeleted, float64(deleted[fam][1]), fam, "orphan")
		for i, proto := range []string{"tcp", "udp", "other"} {
			gauge(descCTFlows, float64(flows[fam][i]), fam, proto)
		}
	}
	idle := 0.0
	if st.Idle {
		idle = 1
	}
	gauge(descCTIdle, idle)
	counter(descCTPasses, float64(st.Passes))
	gauge(descCTLastPass, st.LastPass.Seconds())
	counter(descCTErrors, float64(st.Errors))
}
