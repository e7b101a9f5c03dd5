package main

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// The loaded sets must not share a backend (the engine would write one
// entry for two) nor an address the probes use, and must stay in the
// ranges the apiserver accepts.
func TestLoadedEndpointsAreDistinctAndApartFromTheProbes(t *testing.T) {
	endpoints := netip.MustParsePrefix("198.18.0.0/16")
	seen := map[netip.AddrPort]int{}
	for i := range maxClusterIPs {
		for j := range 10 {
			a := endpointAddr(i, j, 10)
			require.True(t, endpoints.Contains(a), "service %d endpoint %d: %s", i, j, a)
			require.Less(t, int(a.As4()[2])<<8|int(a.As4()[3]), 64000, "service %d endpoint %d: %s is in the probes' range", i, j, a)
			ap := netip.AddrPortFrom(a, uint16(endpointPort(i)))
			prev, dup := seen[ap]
			require.False(t, dup, "service %d and %d share %s", i, prev, ap)
			seen[ap] = i
		}
	}
	probes := map[netip.Addr]bool{}
	for k := range 375 { // 1,500 addresses, 4 per probe
		for j := range 4 {
			a := probeAddr(k, j)
			require.True(t, endpoints.Contains(a))
			require.False(t, probes[a], "probe %d endpoint %d: %s reused", k, j, a)
			probes[a] = true
		}
	}
}

func TestClusterIPsAreDistinctAndInTheServiceRange(t *testing.T) {
	services := netip.MustParsePrefix("198.19.0.0/16")
	seen := map[string]bool{"198.19.0.1": true} // the apiserver's own service
	for i := range maxClusterIPs {
		ip := clusterIP(i)
		require.True(t, services.Contains(netip.MustParseAddr(ip)), ip)
		require.False(t, seen[ip], "cluster IP %s of %d reused", ip, i)
		seen[ip] = true
	}
}

// want follows the translation: an endpoint not ready leaves the backends
// while others are ready; a service without cluster IP is an error.
func TestWantIsTheTranslationOfTheClusterIPFrontend(t *testing.T) {
	svc := kubeService("ns", "a")
	svc.Spec.ClusterIP = "198.19.1.7"
	sl := kubeSlice("ns", "a", "a-1", 8080, []netip.Addr{probeAddr(0, 0), probeAddr(0, 1)})
	sl.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false)}
	fe, bs, err := want(svc, sl)
	require.NoError(t, err)
	require.Equal(t, lb.L3n4Addr{Addr: netip.MustParseAddr("198.19.1.7"), Port: kubePort, Protocol: lb.TCP}, fe)
	require.Len(t, bs, 1)
	require.Equal(t, probeAddr(0, 0), bs[0].Addr)
	require.Equal(t, uint16(8080), bs[0].Port)

	_, bs, err = want(svc) // no slice: the frontend, no backends
	require.NoError(t, err)
	require.NotNil(t, bs)
	require.Empty(t, bs)

	svc.Spec.ClusterIP = ""
	_, _, err = want(svc, sl)
	require.ErrorContains(t, err, "cluster IP")
}

// The probe tells right from wrong on maps a real engine wrote: the exact
// backend set (state included), not a subset, not another state; a deleted
// service is right for want nil.
func TestMapProbeSeesWhatTheEngineWrote(t *testing.T) {
	root := testutil.PinDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sizes := kubeSizes(10)
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	e, err := actorlb.New(ctx, actorlb.Config{BPFRoot: root, MaxEntries: sizes, Logger: log, ReconcileInterval: noReconcile})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	p, err := openMapProbe(root, sizes)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	fe := lb.L3n4Addr{Addr: netip.MustParseAddr("198.19.1.9"), Port: kubePort, Protocol: lb.TCP}
	be := func(a string, st lb.BackendState) lb.Backend {
		return lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr(a), Port: 8080, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight, State: st}
	}
	backends := []lb.Backend{be("198.18.0.1", lb.BackendStateActive), be("198.18.0.2", lb.BackendStateActive)}

	ok, err := p.right(fe, nil)
	require.NoError(t, err)
	require.True(t, ok, "no service yet: right for nil")
	ok, err = p.right(fe, backends)
	require.NoError(t, err)
	require.False(t, ok)

	_, _, err = e.Upsert(ctx, &lb.Service{Frontend: lb.Frontend{L3n4Addr: fe}, Backends: backends})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		want []lb.Backend
		ok   bool
	}{
		{"exact set", []lb.Backend{backends[1], backends[0]}, true},
		{"subset", backends[:1], false},
		{"other state", []lb.Backend{backends[0], be("198.18.0.2", lb.BackendStateTerminating)}, false},
		{"other address", []lb.Backend{backends[0], be("198.18.0.3", lb.BackendStateActive)}, false},
		{"absent", nil, false},
	} {
		ok, err := p.right(fe, c.want)
		require.NoError(t, err, c.name)
		require.Equal(t, c.ok, ok, c.name)
	}

	_, err = e.DeleteByFrontend(ctx, fe)
	require.NoError(t, err)
	at, err := p.waitRight(ctx, fe, nil, time.Millisecond, 5*time.Second)
	require.NoError(t, err)
	require.False(t, at.IsZero())
	_, err = p.waitRight(ctx, fe, backends, time.Millisecond, 20*time.Millisecond)
	require.ErrorContains(t, err, "not right after")
}

func TestKubeSizesHoldTheServicesAndTheirBackends(t *testing.T) {
	for _, n := range []int{1, 1000, 10001, 60000} {
		s := kubeSizes(n)
		require.GreaterOrEqual(t, s.Services, n*11, "n=%d", n)
		require.GreaterOrEqual(t, s.Backends, n*10, "n=%d", n)
		require.GreaterOrEqual(t, s.RevNAT, 1<<16-1, "n=%d", n)
	}
}

// The Maglev scenarios report build time, memory and disruption for the
// default and the largest table, and the disruption stays within issue
// 17's bound (1/N + 1% of the entries change when one of N is removed).
func TestMaglevScenariosReportTheTargets(t *testing.T) {
	res := results{rows: []Row{}}
	require.NoError(t, maglevScenarios(&res))
	got := map[string]float64{}
	for _, r := range res.rows {
		got[r.Scenario+" "+r.Metric] = r.Value
	}
	for _, m := range []string{"16381", "131071"} {
		for _, metric := range []string{"build_ms", "build_cpu_ms", "alloc_bytes_per_build", "table_bytes"} {
			require.Positive(t, got["maglev-"+m+"-x1000 "+metric], "%s %s", m, metric)
		}
	}
	require.Less(t, got["maglev-16381-x1000 removal_changed_besides_own_pct_max"], 1.0)
	require.Equal(t, 0.1, got["maglev-16381-x1000 removal_own_share_pct"])
}

// The maglev service scenario (at a small scale) reports its rows, each
// positive, from an engine on real maps.
func TestMaglevServiceScenariosReportEveryRow(t *testing.T) {
	root := testutil.PinDir(t)
	res := results{rows: []Row{}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	require.NoError(t, maglevServiceScenarios(&res, root, 200, 8, log))
	got := map[string]float64{}
	for _, r := range res.rows {
		got[r.Scenario+" "+r.Metric] = r.Value
	}
	for _, metric := range []string{"create_services_per_s", "create_cpu_us_per_service", "delete_services_per_s", "delete_cpu_us_per_service",
		"create_services_per_s_single_calls", "create_cpu_us_per_service_single_calls", "restore_ready_ms", "restore_cpu_ms"} {
		require.Positive(t, got["maglev-services-200-x10 "+metric], metric)
	}
	require.Len(t, res.rows, 8)
}

// The packet datapath's scenarios (at a small scale) report every row the
// README's table reads, each positive, and the verdicts they check hold.
func TestPacketScenariosReportEveryRow(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	res := results{rows: []Row{}}
	small := packetScale{repeat: 10_000, calls: 200, conns: 20, mib: 8}
	require.NoError(t, packetScenarios(&res, root, small))
	require.NoError(t, topoScenarios(&res, root, small))
	got := map[string]float64{}
	for _, r := range res.rows {
		got[r.Scenario+" "+r.Metric] = r.Value
	}
	for _, key := range []string{
		"xdp-miss ns_per_packet", "xdp-miss cpu_ns_per_packet", "xdp-miss floor_ns_per_packet", "xdp-miss ratio_to_floor",
		"xdp-ct-hit-dsr ns_per_packet", "xdp-ct-hit-dsr ratio_to_floor",
		"xdp-new-snat ns_per_call", "xdp-new-snat floor_ns_per_call", "xdp-new-snat cpu_ns_per_call", "xdp-new-snat ratio_to_floor",
		"tcp-connections lb_per_s", "tcp-connections direct_per_s", "tcp-connections lb_cpu_us_per_connection", "tcp-connections lb_ratio_to_direct",
		"tcp-throughput lb_mib_per_s", "tcp-throughput direct_mib_per_s", "tcp-throughput lb_ratio_to_direct",
	} {
		require.Positive(t, got[key], key)
	}
}
