package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/k8s/source"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/tests/kube/cluster"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// kubeOptions size the Kubernetes-mode scenarios.
type kubeOptions struct {
	run          bool
	changes      int   // single changes per load level (a mix of the five kinds)
	loads        []int // services loaded while the changes are timed
	syncServices int   // services present when the sync agent starts
	endpoints    int   // endpoints per loaded service (at most 10)
	workers      int   // concurrent writers when loading the apiserver
	poll         time.Duration
	syncRounds   int    // runs of the sync agent
	heapProfile  string // the sync agent's heap profile (last round)
}

// The kinds of single change, in the order of a probe's life.
var changeKinds = []string{"service_created", "endpoint_added", "endpoint_not_ready", "endpoint_terminating", "service_deleted"}

// kubeScenarios runs the Kubernetes-mode scenarios against a real etcd and
// kube-apiserver: network programming latency (k8s-latency-N) and the
// initial sync (k8s-sync-N-xE). Without the kube binaries it says so and
// adds nothing.
func kubeScenarios(res *results, root string, o kubeOptions) error {
	if !o.run {
		return nil
	}
	switch {
	case o.endpoints < 1 || o.endpoints > 10:
		return fmt.Errorf("kube scenarios: --kube-endpoints %d must be 1..10", o.endpoints)
	case len(o.loads) == 0 || slices.Min(o.loads) < 0:
		return fmt.Errorf("kube scenarios: --kube-loads %v must list service counts", o.loads)
	case o.syncServices < 1 || slices.Max(o.loads)+o.syncServices > maxClusterIPs:
		return fmt.Errorf("kube scenarios: --kube-sync-services %d must be 1..%d (with the largest load)", o.syncServices, maxClusterIPs-slices.Max(o.loads))
	case o.changes < len(changeKinds) || o.workers < 1 || o.poll <= 0 || o.syncRounds < 1:
		return fmt.Errorf("kube scenarios: --kube-changes %d must be at least %d, --kube-workers %d, --kube-poll %s and --kube-sync-rounds %d positive",
			o.changes, len(changeKinds), o.workers, o.poll, o.syncRounds)
	}
	if _, err := cluster.FindBinaries(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: Kubernetes scenarios skipped: %v\n", err)
		return nil
	}
	ctx := context.Background()
	debug.FreeOSMemory() // the engine scenarios' garbage, if they ran
	began := time.Now()
	start := time.Now()
	c, err := cluster.New(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	res.add("k8s-cluster", "start_s", time.Since(start).Seconds(), "s")
	if err := bindNodeProxier(ctx, c.Client); err != nil {
		return err
	}
	ac := rest.CopyConfig(c.AgentConfig)
	source.UseProtobuf(ac) // as the agent (cmd/actorlb)
	agent, err := kubernetes.NewForConfig(ac)
	if err != nil {
		return fmt.Errorf("agent client: %w", err)
	}
	cp := childPIDs()
	if err := kubeLatency(ctx, res, c, agent, root+"/k8s-latency", o, cp); err != nil {
		return err
	}
	if err := kubeSync(ctx, res, c, root+"/k8s-sync", o, cp); err != nil {
		return err
	}
	res.add("k8s-total", "wall_s", time.Since(began).Seconds(), "s")
	return nil
}

// bindNodeProxier gives the agent user kube-proxy's rights
// (system:node-proxier): list and watch services, endpointslices and
// nodes, no get.
func bindNodeProxier(ctx context.Context, c kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "actorlb-bench"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create cluster role: %w", err)
	}
	bind := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "actorlb-bench"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "actorlb-agent"}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create cluster role binding: %w", err)
	}
	return nil
}

// kubeSizes are map sizes for n services of up to 10 backends.
func kubeSizes(n int) maps.Sizes {
	s := maps.Sizes{Services: 1 << 16, Backends: 1 << 16, RevNAT: 1 << 16}
	for s.Services < n*12 {
		s.Services <<= 1
	}
	for s.Backends < n*11 {
		s.Backends <<= 1
	}
	return s
}

// change is one timed single change.
type change struct {
	kind   string
	total  time.Duration // write start -> map entry right
	toCall time.Duration // write start -> start of the engine call that applied it (-1: none seen)
	call   time.Duration // that engine call
}

// kubeLatency times single changes with the source in-process on a real
// engine, at each load level, beside the apiserver's own write->watch-event
// floor measured at that level.
func kubeLatency(ctx context.Context, res *results, c *cluster.Cluster, agent kubernetes.Interface, root string, o kubeOptions, cp []int) error {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	maxLoad := slices.Max(o.loads)
	sizes := kubeSizes(maxLoad + o.changes)
	e, err := actorlb.New(ctx, actorlb.Config{BPFRoot: root, MaxEntries: sizes, Logger: log, ReconcileInterval: noReconcile})
	if err != nil {
		return err
	}
	defer maps.Remove(root)
	defer e.Close()
	probe, err := openMapProbe(root, sizes)
	if err != nil {
		return err
	}
	defer probe.Close()
	tt := &timedTarget{e: e}
	reg := prometheus.NewRegistry()
	src, err := newKubeSource(kubeSourceConfig{Client: agent, Target: tt, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(sctx) }()
	defer func() { stop(); <-done }()

	const ns = "bench-latency"
	if err := createNamespace(ctx, c.Client, ns); err != nil {
		return err
	}
	base, err := proxiedServices(ctx, c.Client)
	if err != nil {
		return err
	}
	loaded, nextProbe := 0, 0
	for _, load := range o.loads {
		if load < loaded {
			return fmt.Errorf("kube latency: --kube-loads must grow (%d after %d)", load, loaded)
		}
		t0 := time.Now()
		if err := createLoaded(ctx, c.Client, ns, "load", loaded, load, 0, o.endpoints, o.workers); err != nil {
			return err
		}
		if err := waitApplied(ctx, src, base+load, 2*time.Minute); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: k8s: %d services loaded and applied in %s\n", load, time.Since(t0).Round(time.Millisecond))
		loaded = load
		time.Sleep(500 * time.Millisecond) // let the apiserver and the source settle

		// Warm up (the first changes after the apiserver starts, or after
		// a load, are slower: caches, connections), untimed.
		for range 2 {
			if _, err := probeCycle(ctx, c.Client, probe, tt, ns, nextProbe, o.poll); err != nil {
				return err
			}
			nextProbe++
		}
		floor, err := cluster.MeasureWatchLatency(ctx, c.Client, ns, o.changes)
		if err != nil {
			return err
		}
		h0 := src.progress().ProgrammingSeconds
		cpu0, cp0, t1 := cpuTime(), controlPlaneCPU(cp), time.Now()
		var changes []change
		for len(changes) < o.changes {
			cs, err := probeCycle(ctx, c.Client, probe, tt, ns, nextProbe, o.poll)
			if err != nil {
				return err
			}
			nextProbe++
			changes = append(changes, cs...)
		}
		wall, cpu, cpCPU := time.Since(t1), cpuTime()-cpu0, controlPlaneCPU(cp)-cp0
		h1 := src.progress().ProgrammingSeconds
		if p := src.progress(); p.Conflicts > 0 || p.LastApplyError != "" {
			return fmt.Errorf("kube latency: source reports %d conflicts, last apply error %q", p.Conflicts, p.LastApplyError)
		}
		reportLatency(res, fmt.Sprintf("k8s-latency-%d", load), changes, floor, wall, cpu, cpCPU, h0, h1)
	}
	return nil
}

// proxiedServices counts the services in the cluster that the source
// programs: those with a cluster IP (the apiserver's own default/kubernetes
// among them).
func proxiedServices(ctx context.Context, c kubernetes.Interface) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 1000}
	for {
		l, err := c.CoreV1().Services("").List(ctx, opts)
		if err != nil {
			return 0, fmt.Errorf("list services: %w", err)
		}
		for _, s := range l.Items {
			if ip := s.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone && s.Spec.Type != corev1.ServiceTypeExternalName {
				n++
			}
		}
		if l.Continue == "" {
			return n, nil
		}
		opts.Continue = l.Continue
	}
}

// waitApplied waits until the source has applied n services and has
// nothing pending.
func waitApplied(ctx context.Context, src kubeSource, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p := src.progress()
		if p.Synced && p.Services == n && p.Pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube: source not applied after %s: synced %v, services %d of %d, pending %d, last error %q",
				timeout, p.Synced, p.Services, n, p.Pending, p.LastApplyError)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settle is the pause after an untimed write, so that the source's
// debounce of that write does not shorten the next timed change.
const settle = 50 * time.Millisecond

// changeTimeout bounds one change (Kubernetes' SLO is 30 s; a change of
// the bench takes milliseconds).
const changeTimeout = 30 * time.Second

// probeCycle makes the five single changes of one probe service's life,
// each timed from just before its apiserver write to its map entry being
// right: the service created (its slice of 3 ready endpoints existed),
// an endpoint added, one not ready, one terminating, the service deleted.
// Its slice is created before and deleted after, untimed.
func probeCycle(ctx context.Context, c kubernetes.Interface, probe *mapProbe, tt *timedTarget, ns string, k int, poll time.Duration) ([]change, error) {
	name := "probe-" + strconv.Itoa(k)
	eps := c.DiscoveryV1().EndpointSlices(ns)
	sl, err := eps.Create(ctx, kubeSlice(ns, name, name+"-1", 8080, []netip.Addr{probeAddr(k, 0), probeAddr(k, 1), probeAddr(k, 2)}), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("probe %s: create slice: %w", name, err)
	}
	time.Sleep(settle)
	var out []change
	var svc *corev1.Service
	timed := func(kind string, write func() error) error {
		t0 := time.Now()
		if err := write(); err != nil {
			return fmt.Errorf("probe %s: %s: %w", name, kind, err)
		}
		var fe lb.L3n4Addr
		var backends []lb.Backend
		if kind == "service_deleted" {
			fe, _, err = want(svc, sl)
		} else {
			fe, backends, err = want(svc, sl)
		}
		if err != nil {
			return err
		}
		at, err := probe.waitRight(ctx, fe, backends, poll, changeTimeout)
		if err != nil {
			return fmt.Errorf("probe %s: %s: %w", name, kind, err)
		}
		ch := change{kind: kind, total: at.Sub(t0), toCall: -1}
		if call, ok := tt.lastCallWithin(t0, at); ok {
			ch.toCall, ch.call = call.start.Sub(t0), call.end.Sub(call.start)
		}
		out = append(out, ch)
		return nil
	}
	updateSlice := func(edit func(*discoveryv1.EndpointSlice)) func() error {
		return func() error {
			next := sl.DeepCopy()
			edit(next)
			var err error
			sl, err = eps.Update(ctx, next, metav1.UpdateOptions{})
			return err
		}
	}
	steps := []struct {
		kind  string
		write func() error
	}{
		{"service_created", func() error {
			var err error
			svc, err = c.CoreV1().Services(ns).Create(ctx, kubeService(ns, name), metav1.CreateOptions{})
			return err
		}},
		{"endpoint_added", updateSlice(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints = append(s.Endpoints, kubeSlice(ns, name, "", 8080, []netip.Addr{probeAddr(k, 3)}).Endpoints[0])
		})},
		{"endpoint_not_ready", updateSlice(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(false)}
		})},
		{"endpoint_terminating", updateSlice(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[2].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
		})},
		{"service_deleted", func() error {
			return c.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}},
	}
	for _, s := range steps {
		if err := timed(s.kind, s.write); err != nil {
			return nil, err
		}
	}
	if err := eps.Delete(ctx, sl.Name, metav1.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("probe %s: delete slice: %w", name, err)
	}
	time.Sleep(settle)
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func reportLatency(res *results, scen string, changes []change, floor cluster.Latency, wall, cpu, cpCPU time.Duration, h0, h1 histogramSum) {
	pct := func(ds []time.Duration, p float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return cluster.Percentile(s, p)
	}
	var all, toCall, call []time.Duration
	for _, ch := range changes {
		all = append(all, ch.total)
		if ch.toCall >= 0 {
			toCall, call = append(toCall, ch.toCall), append(call, ch.call)
		}
	}
	p99 := pct(all, 99)
	res.add(scen, "changes", float64(len(changes)), "count")
	res.add(scen, "p50_ms", ms(pct(all, 50)), "ms")
	res.add(scen, "p99_ms", ms(p99), "ms")
	res.add(scen, "max_ms", ms(pct(all, 100)), "ms")
	res.add(scen, "floor_p50_ms", ms(floor.P50), "ms")
	res.add(scen, "floor_p99_ms", ms(floor.P99), "ms")
	res.add(scen, "floor_samples", float64(floor.N), "count")
	res.add(scen, "p99_minus_floor_p99_ms", ms(p99-floor.P99), "ms")
	for _, kind := range changeKinds {
		var ds []time.Duration
		for _, ch := range changes {
			if ch.kind == kind {
				ds = append(ds, ch.total)
			}
		}
		res.add(scen, kind+"_p50_ms", ms(pct(ds, 50)), "ms")
		res.add(scen, kind+"_p99_ms", ms(pct(ds, 99)), "ms")
	}
	// Where the time goes: to the start of the engine call that applied
	// the change (apiserver, watch, informer, the source's debounce), then
	// that call; the rest is the poll's detection.
	res.add(scen, "to_engine_call_p50_ms", ms(pct(toCall, 50)), "ms")
	res.add(scen, "to_engine_call_p99_ms", ms(pct(toCall, 99)), "ms")
	res.add(scen, "engine_call_p50_ms", ms(pct(call, 50)), "ms")
	res.add(scen, "engine_call_p99_ms", ms(pct(call, 99)), "ms")
	if n := h1.Count - h0.Count; n > 0 {
		res.add(scen, "source_metric_mean_ms", (h1.Sum-h0.Sum)/float64(n)*1000, "ms")
	}
	// CPU per change: this process (source, engine, the map poll and the
	// writes' client) and the apiserver with etcd, over the changes and
	// their untimed slice writes.
	res.add(scen, "cpu_ms_per_change", ms(cpu)/float64(len(changes)), "ms")
	res.add(scen, "control_plane_cpu_ms_per_change", ms(cpCPU)/float64(len(changes)), "ms")
	res.add(scen, "wall_s", wall.Seconds(), "s")
}

// syncReport is what the sync agent prints (one JSON object on stdout).
type syncReport struct {
	Services, Frontends int
	// From Run to the informers' sync (the source's log line), to the
	// first SyncSource call, to its end: the last map write.
	ListS, ToCallMS, SyncCallMS, SyncMS float64
	SyncCPUMS                           float64 // the agent's CPU from the informers' sync to the last write
	BatchMS, BatchCPUMS                 float64 // UpsertBatch of the same set on fresh maps, the source idle
	DirectSyncMS, DirectSyncCPUMS       float64 // the engine's SyncSource of the same set on fresh maps, the source idle
	BareBatchMS, BareBatchCPUMS         float64 // UpsertBatch again once the source has stopped
	RSSFreedMB                          float64 // RSS once freed memory is returned to the OS
	RSSMB, RSSPeakMB, HeapMB            float64
	MapWrites                           uint64
	SyncGCs                             uint64  // garbage collections from the informers' sync to the last write
	SyncGCCPUMS                         float64 // their CPU time
	SyncPageFaults                      int64   // the agent's minor page faults from the informers' sync to the last write
}

// kubeSync loads the apiserver with the sync set and runs the sync agent
// (this program again, --kube-sync-agent) as a process of its own, so that
// its RSS is that of an agent: engine, source and informer caches.
func kubeSync(ctx context.Context, res *results, c *cluster.Cluster, root string, o kubeOptions, cp []int) error {
	// The latency scenario's objects go first: the agent sees the whole
	// cluster.
	t0 := time.Now()
	if err := deleteAllIn(ctx, c.Client, "bench-latency", o.workers); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: k8s: latency objects deleted in %s\n", time.Since(t0).Round(time.Millisecond))
	const ns = "bench-sync"
	if err := createNamespace(ctx, c.Client, ns); err != nil {
		return err
	}
	n := o.syncServices
	scen := fmt.Sprintf("k8s-sync-%s-x%d", kilo(n), o.endpoints)
	cpu0, cp0, t1 := cpuTime(), controlPlaneCPU(cp), time.Now()
	if err := createLoaded(ctx, c.Client, ns, "svc", 0, n, slices.Max(o.loads), o.endpoints, o.workers); err != nil {
		return err
	}
	setup, cpu, cpCPU := time.Since(t1), cpuTime()-cpu0, controlPlaneCPU(cp)-cp0
	fmt.Fprintf(os.Stderr, "bench: k8s: %d services and %d slices created in %s\n", n, n, setup.Round(time.Millisecond))
	res.add(scen, "setup_s", setup.Seconds(), "s")
	res.add(scen, "setup_objects_per_s", float64(2*n)/setup.Seconds(), "objects/s")
	res.add(scen, "setup_cpu_ms_per_object_bench", ms(cpu)/float64(2*n), "ms")
	res.add(scen, "setup_cpu_ms_per_object_control_plane", ms(cpCPU)/float64(2*n), "ms")

	all, err := proxiedServices(ctx, c.Client)
	if err != nil {
		return err
	}
	var rs []syncReport
	var agentCP []time.Duration
	for round := range o.syncRounds {
		args := []string{"--kube-sync-agent", "--kube-agent-kubeconfig", c.AgentKubeconfig,
			"--kube-agent-root", fmt.Sprintf("%s-%d", root, round), "--kube-sync-services", strconv.Itoa(all)}
		if o.heapProfile != "" && round == o.syncRounds-1 {
			args = append(args, "--kube-agent-heapprofile", o.heapProfile)
		}
		var r syncReport
		cp1 := controlPlaneCPU(cp)
		if err := runSelf(ctx, args, &r); err != nil {
			return fmt.Errorf("kube sync: agent: %w", err)
		}
		agentCP = append(agentCP, controlPlaneCPU(cp)-cp1)
		if r.Services != all {
			return fmt.Errorf("kube sync: the agent synced %d services, want %d", r.Services, all)
		}
		fmt.Fprintf(os.Stderr, "bench: k8s: sync agent round %d: %+v\n", round, r)
		rs = append(rs, r)
	}
	med := func(get func(syncReport) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = get(r)
		}
		return median(vs)
	}
	fes := float64(rs[0].Frontends)
	syncMS := med(func(r syncReport) float64 { return r.SyncMS })
	batchMS := med(func(r syncReport) float64 { return r.BatchMS })
	res.add(scen, "services", float64(all), "count")
	res.add(scen, "frontends", fes, "count")
	res.add(scen, "rounds", float64(len(rs)), "count")
	res.add(scen, "list_s", med(func(r syncReport) float64 { return r.ListS }), "s")
	res.add(scen, "informer_sync_to_engine_call_ms", med(func(r syncReport) float64 { return r.ToCallMS }), "ms")
	res.add(scen, "engine_sync_call_ms", med(func(r syncReport) float64 { return r.SyncCallMS }), "ms")
	res.add(scen, "sync_ms", syncMS, "ms")
	res.add(scen, "sync_ms_min", slices.MinFunc(rs, func(a, b syncReport) int { return cmp.Compare(a.SyncMS, b.SyncMS) }).SyncMS, "ms")
	res.add(scen, "sync_ms_max", slices.MaxFunc(rs, func(a, b syncReport) int { return cmp.Compare(a.SyncMS, b.SyncMS) }).SyncMS, "ms")
	res.add(scen, "sync_services_per_s", fes/(syncMS/1000), "services/s")
	res.add(scen, "sync_cpu_us_per_service", med(func(r syncReport) float64 { return r.SyncCPUMS })*1000/fes, "us")
	res.add(scen, "sync_gcs", med(func(r syncReport) float64 { return float64(r.SyncGCs) }), "count")
	res.add(scen, "sync_gc_cpu_ms", med(func(r syncReport) float64 { return r.SyncGCCPUMS }), "ms")
	res.add(scen, "sync_page_faults", med(func(r syncReport) float64 { return float64(r.SyncPageFaults) }), "faults")
	res.add(scen, "upsertbatch_ms", batchMS, "ms")
	res.add(scen, "upsertbatch_services_per_s", fes/(batchMS/1000), "services/s")
	res.add(scen, "upsertbatch_cpu_us_per_service", med(func(r syncReport) float64 { return r.BatchCPUMS })*1000/fes, "us")
	res.add(scen, "ratio_to_upsertbatch", med(func(r syncReport) float64 { return r.SyncMS / r.BatchMS }), "x")
	res.add(scen, "upsertbatch_source_stopped_ms", med(func(r syncReport) float64 { return r.BareBatchMS }), "ms")
	res.add(scen, "upsertbatch_source_stopped_cpu_us_per_service", med(func(r syncReport) float64 { return r.BareBatchCPUMS })*1000/fes, "us")
	res.add(scen, "ratio_to_upsertbatch_source_stopped", med(func(r syncReport) float64 { return r.SyncMS / r.BareBatchMS }), "x")
	res.add(scen, "engine_syncsource_direct_ms", med(func(r syncReport) float64 { return r.DirectSyncMS }), "ms")
	res.add(scen, "engine_syncsource_direct_cpu_us_per_service", med(func(r syncReport) float64 { return r.DirectSyncCPUMS })*1000/fes, "us")
	res.add(scen, "agent_rss_mb", med(func(r syncReport) float64 { return r.RSSMB }), "MB")
	res.add(scen, "agent_rss_peak_mb", med(func(r syncReport) float64 { return r.RSSPeakMB }), "MB")
	res.add(scen, "agent_rss_after_free_os_memory_mb", med(func(r syncReport) float64 { return r.RSSFreedMB }), "MB")
	res.add(scen, "agent_heap_mb", med(func(r syncReport) float64 { return r.HeapMB }), "MB")
	res.add(scen, "agent_control_plane_cpu_ms", ms(median(agentCP)), "ms")
	res.add(scen, "map_writes", med(func(r syncReport) float64 { return float64(r.MapWrites) }), "entries")
	return nil
}

func kilo(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}
