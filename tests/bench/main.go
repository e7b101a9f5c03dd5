package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/benchset"
	"github.com/actorlb/actorlb/internal/bpffs"
	"github.com/actorlb/actorlb/internal/engine"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
)

// Row is one figure of bench-results.json. The rows of an issue's
// targets (targets.go) also carry the target's name, its bound and
// whether the figure meets it.
type Row struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Name     string  `json:"name,omitempty"`
	Target   string  `json:"target,omitempty"`
	Met      *bool   `json:"met,omitempty"`
}

type results struct{ rows []Row }

func (r *results) add(scenario, metric string, v float64, unit string) {
	r.rows = append(r.rows, Row{Scenario: scenario, Metric: metric, Value: v, Unit: unit})
}

func main() {
	out := pflag.String("out", "bench-results.json", "where to write the JSON rows")
	bulkN := pflag.Int("bulk-services", 10000, "services in the bulk, latency, restore and memory scenarios (10 backends each)")
	insertN := pflag.Int("insert-services", 50000, "services in the insert/delete scenario (1 backend each)")
	callers := pflag.Int("callers", 8, "concurrent callers in the bulk and insert/delete scenarios")
	batch := pflag.Int("batch", 1000, "services per UpsertBatch/DeleteBatch call in the insert/delete scenario")
	pflag.IntVar(&bulkBatch, "bulk-batch", 100, "services per UpsertBatch call in the batched bulk scenario")
	cpuProfile := pflag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	pflag.StringVar(&bulkProfile, "cpuprofile-bulk", "", "write a CPU profile of the single-call bulk scenario (its last round) alone to this file")
	pflag.StringVar(&batchedProfile, "cpuprofile-batched", "", "write a CPU profile of the batched bulk scenarios (three rounds of UpsertBatch calls of each layout, alternated; samples labelled layout=sequential or layout=spread: go tool pprof -tagfocus layout=spread) alone to this file")
	pflag.StringVar(&restoreProfile, "cpuprofile-restore", "", "write a CPU profile of the warm restarts (restore-10k-x10) alone to this file")
	pflag.StringVar(&insertProfile, "cpuprofile-insert", "", "write a CPU profile of the batched insert and delete (insert-50k-x1) alone to this file")
	pflag.StringVar(&updateProfile, "cpuprofile-update", "", "write a CPU profile of the endpoint changes (update-10k-x10: the last round's timed updates alone) to this file")
	memProfile := pflag.String("memprofile", "", "write an allocation profile of the whole run to this file")
	pflag.StringVar(&heapProfile, "heapprofile", "", "write a heap profile (in-use memory) taken where memory-10k-x10 is measured to this file")
	pflag.StringVar(&heapProfileV6, "heapprofile-ipv6", "", "write a heap profile (in-use memory) taken where memory-10k-x10's IPv6 figure is measured to this file")
	pflag.StringVar(&heapProfileV6Spread, "heapprofile-ipv6-spread", "", "write a heap profile (in-use memory) taken where memory-10k-x10's spread IPv6 figure (every address in a prefix of its own) is measured to this file")
	pflag.BoolVar(&kube.run, "kube", true, "run the Kubernetes-mode scenarios (skipped with a message when the kube binaries are not built: make kube-tools)")
	pflag.BoolVar(&kubeOnly, "kube-only", false, "run the Kubernetes-mode scenarios alone")
	pflag.BoolVar(&packetOnly, "packet-only", false, "run the packet-datapath (XDP) scenarios alone")
	pflag.BoolVar(&maglevOnly, "maglev-only", false, "run the Maglev scenarios (tables, and maglev services through the engine) alone")
	pflag.IntVar(&kube.changes, "kube-changes", 200, "single changes timed at each load level of the latency scenario")
	pflag.IntSliceVar(&kube.loads, "kube-loads", []int{20, 1000}, "services loaded in the apiserver at each level of the latency scenario (growing)")
	pflag.IntVar(&kube.syncServices, "kube-sync-services", 10000, "services present when the agent of the initial-sync scenario starts")
	pflag.IntVar(&kube.endpoints, "kube-endpoints", 10, "endpoints per loaded service (1..10)")
	pflag.IntVar(&kube.workers, "kube-workers", 32, "concurrent writers loading the apiserver")
	pflag.DurationVar(&kube.poll, "kube-poll", 500*time.Microsecond, "interval of the map poll that sees a change applied")
	syncAgent := pflag.Bool("kube-sync-agent", false, "run as the agent of the initial-sync scenario (the bench starts it)")
	agentKubeconfig := pflag.String("kube-agent-kubeconfig", "", "the sync agent's kubeconfig")
	agentRoot := pflag.String("kube-agent-root", "", "the sync agent's pin directory")
	agentHeap := pflag.String("kube-agent-heapprofile", "", "where the sync agent writes its heap profile")
	pflag.StringVar(&kube.heapProfile, "kube-heapprofile", "", "write a heap profile of the initial-sync agent (last round), taken where its memory is measured, to this file")
	pflag.IntVar(&kube.syncRounds, "kube-sync-rounds", 3, "agent runs of the initial-sync scenario (fresh engine and source each; medians reported)")
	markdownFrom := pflag.StringSlice("markdown-from", nil, "print the README's tables (the engine's figures with their CPU, issue 18's targets) of the run in this bench-results.json, and measure nothing; with more files (comma-separated, or the flag again), the first run's figures and each one's range over all the runs")
	restoreChildWhat := pflag.String("restore-child", "", "run as a restore-10k-x10 child: dump, engine, engine-4k or engine-prefaulted (the bench starts it)")
	restoreChildRoot := pflag.String("restore-child-root", "", "the restore child's pin directory")
	for _, f := range []string{"kube-sync-agent", "kube-agent-kubeconfig", "kube-agent-root", "kube-agent-heapprofile", "restore-child", "restore-child-root"} {
		_ = pflag.CommandLine.MarkHidden(f)
	}
	pflag.Parse()
	if *syncAgent {
		if err := runSyncAgent(*agentKubeconfig, *agentRoot, kube.syncServices, *agentHeap); err != nil {
			fmt.Fprintln(os.Stderr, "bench: sync agent:", err)
			os.Exit(1)
		}
		return
	}
	if len(*markdownFrom) > 0 {
		var runs [][]Row
		var err error
		for _, path := range *markdownFrom {
			var rows []Row
			if rows, err = readRows(path); err != nil {
				break
			}
			runs = append(runs, rows)
		}
		if err == nil {
			err = writeMarkdown(os.Stdout, runs...)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *restoreChildWhat != "" {
		if err := runRestoreChild(*restoreChildWhat, *restoreChildRoot); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	if heapProfile != "" || heapProfileV6 != "" || heapProfileV6Spread != "" {
		runtime.MemProfileRate = 512 // fine enough to tell the indexes apart
	}
	if err := run(*out, *bulkN, *insertN, *callers, *batch); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err == nil {
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
}

func run(out string, bulkN, insertN, callers, batch int) error {
	if err := bpffs.Ensure(bpffs.DefaultMount); err != nil {
		return err
	}
	root, err := os.MkdirTemp(bpffs.DefaultMount, "actorlb-bench-")
	if err != nil {
		return fmt.Errorf("pin dir: %w (run as root)", err)
	}
	defer os.RemoveAll(root)
	res := results{rows: []Row{}}
	if packetOnly {
		if err := packetScenarios(&res, root, fullPacketScale); err != nil {
			return fmt.Errorf("packet datapath: %w", err)
		}
		if err := topoScenarios(&res, root, fullPacketScale); err != nil {
			return fmt.Errorf("packet datapath topology: %w", err)
		}
		kube.run = false
	}
	if maglevOnly {
		kube.run = false
	}
	var targets []Row
	if !kubeOnly && !packetOnly {
		if !maglevOnly {
			if err := engineScenarios(&res, root, bulkN, insertN, callers, batch); err != nil {
				return err
			}
			// Issue 18's targets, judged on this run's figures.
			ts, missing, err := targetRows(18, issue18, res.rows)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				return fmt.Errorf("targets: the engine scenarios wrote no row %s", strings.Join(missing, ", "))
			}
			targets = ts
		}
		if err := maglevScenarios(&res); err != nil {
			return err
		}
		log := logrus.New()
		log.SetLevel(logrus.WarnLevel)
		if err := maglevServiceScenarios(&res, root, 2000, callers, log); err != nil {
			return err
		}
	}
	if !kubeOnly && !packetOnly && !maglevOnly {
		if err := packetScenarios(&res, root, fullPacketScale); err != nil {
			return fmt.Errorf("packet datapath: %w", err)
		}
		if err := topoScenarios(&res, root, fullPacketScale); err != nil {
			return fmt.Errorf("packet datapath topology: %w", err)
		}
	}
	if err := kubeScenarios(&res, root, kube); err != nil {
		return err
	}
	print(res.rows)
	printTargets(os.Stdout, 18, targets)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the targets' bounds read "<= 2", not "\u003c= 2"
	enc.SetIndent("", "  ")
	if err := enc.Encode(append(res.rows, targets...)); err != nil {
		return err
	}
	return os.WriteFile(out, b.Bytes(), 0o644)
}

// engineScenarios runs the engine's scenarios (all but the Kubernetes
// ones) with pins under root.
func engineScenarios(res *results, root string, bulkN, insertN, callers, batch int) error {
	sizes := benchSizes
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)

	// The machine's stalls first, while it is quiet: the latency rows
	// below can be no better than the machine lets a busy thread run.
	addStalls(res)

	bulk := benchset.Sequential(bulkN, 10)
	// Floors: the same entries the bulk scenario writes, straight to maps.
	fl, err := floorsCPU(root, sizes, bulk)
	if err != nil {
		return err
	}
	putFloor, batchFloor := fl.put, fl.batch
	res.add("floor", "put_services_per_s", float64(bulkN)/putFloor.Seconds(), "services/s")
	res.add("floor", "batch_services_per_s", float64(bulkN)/batchFloor.Seconds(), "services/s")
	res.add("floor", "put_cpu_us_per_service", usPer(fl.putCPU, bulkN), "us")
	res.add("floor", "batch_cpu_us_per_service", usPer(fl.batchCPU, bulkN), "us")
	res.add("floor", "batch_user_cpu_us_per_service", usPer(fl.batchUser, bulkN), "us")
	res.add("floor", "batch_system_cpu_us_per_service", usPer(fl.batchSys, bulkN), "us")

	// Bulk through UpsertBatch: callers goroutines, bulkBatch services per
	// call, three rounds on fresh engines and maps; the medians are
	// reported. Each round is followed by one of the same bulk with a
	// cluster's addresses (benchset.Spread: each service's backends pods
	// on ten of 200 nodes, frontends drawn at random), against the same
	// batch floor: its entries differ from the bulk's in the service map's
	// frontend addresses alone, which the kernel's hash costs the same.
	// The rounds alternate so that the ratio of each spread round to the
	// sequential one before it reads past the VM's drift.
	ctx := context.Background()
	spread := benchset.Spread(bulkN, 10)
	stopBatched := profileTo(batchedProfile)
	var seqRounds, spreadRounds []batchedRound
	for round := range 3 {
		for _, l := range []struct {
			name, dir string
			svcs      []*lb.Service
			rounds    *[]batchedRound
		}{{"sequential", "bulk", bulk, &seqRounds}, {"spread", "spread", spread, &spreadRounds}} {
			r, err := batchedBulkRound(ctx, fmt.Sprintf("%s/%s-%d", root, l.dir, round), sizes, log, l.svcs, callers, bulkBatch, l.name)
			if err != nil {
				stopBatched()
				return err
			}
			*l.rounds = append(*l.rounds, r)
		}
	}
	stopBatched()
	bb, sb := medianRounds(seqRounds), medianRounds(spreadRounds)
	batched := bb.wall
	res.add("bulk-10k-x10", "services_per_s", float64(bulkN)/batched.Seconds(), "services/s")
	res.add("bulk-10k-x10", "ratio_to_put_floor", putFloor.Seconds()/batched.Seconds(), "x")
	res.add("bulk-10k-x10", "ratio_to_batch_floor", batchFloor.Seconds()/batched.Seconds(), "x")
	res.add("bulk-10k-x10", "cpu_us_per_service", usPer(bb.cpu, bulkN), "us")
	res.add("bulk-10k-x10", "cpu_ratio_to_batch_floor", bb.cpu.Seconds()/fl.batchCPU.Seconds(), "x")
	res.add("bulk-10k-x10", "user_cpu_us_per_service", usPer(bb.user, bulkN), "us")
	res.add("bulk-10k-x10", "system_cpu_us_per_service", usPer(bb.sys, bulkN), "us")
	res.add("bulk-10k-x10", "gc_cpu_us_per_service", usPer(bb.gc, bulkN), "us")
	res.add("bulk-10k-x10", "page_faults_per_service", bb.faults/float64(bulkN), "faults")
	res.add("bulk-10k-x10", "alloc_bytes_per_service_batched", bb.allocs, "bytes")

	res.add("bulk-10k-x10-spread", "services_per_s", float64(bulkN)/sb.wall.Seconds(), "services/s")
	res.add("bulk-10k-x10-spread", "cpu_us_per_service", usPer(sb.cpu, bulkN), "us")
	res.add("bulk-10k-x10-spread", "cpu_ratio_to_batch_floor", sb.cpu.Seconds()/fl.batchCPU.Seconds(), "x")
	res.add("bulk-10k-x10-spread", "user_cpu_us_per_service", usPer(sb.user, bulkN), "us")
	res.add("bulk-10k-x10-spread", "gc_cpu_us_per_service", usPer(sb.gc, bulkN), "us")
	res.add("bulk-10k-x10-spread", "alloc_bytes_per_service", sb.allocs, "bytes")
	// Each spread round against the sequential round just before it.
	var cpuRatios, userRatios []float64
	for i := range spreadRounds {
		cpuRatios = append(cpuRatios, spreadRounds[i].cpu.Seconds()/seqRounds[i].cpu.Seconds())
		userRatios = append(userRatios, spreadRounds[i].user.Seconds()/seqRounds[i].user.Seconds())
	}
	res.add("bulk-10k-x10-spread", "cpu_ratio_to_sequential", median(cpuRatios), "x")
	res.add("bulk-10k-x10-spread", "user_cpu_ratio_to_sequential", median(userRatios), "x")

	// The same services as one call, the shape of a Kubernetes initial
	// sync: one UpsertBatch, then one SyncSource, of all of them, three
	// rounds each on fresh engines and maps (medians).
	for _, how := range []string{"one_upsertbatch", "one_syncsource"} {
		var walls, cpus []time.Duration
		var allocs, faults []float64
		for round := range 3 {
			dir := fmt.Sprintf("%s/one-%s-%d", root, how, round)
			e, err := actorlb.New(ctx, engineConfig(dir, sizes, log))
			if err != nil {
				return err
			}
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0, f0, start := cpuTime(), minorFaults(), time.Now()
			if how == "one_upsertbatch" {
				rs, cerr := e.UpsertBatch(ctx, bulk)
				err = firstErr(rs, cerr, func(r actorlb.UpsertResult) error { return r.Err })
			} else {
				_, err = e.SyncSource(ctx, lb.SourceAPI, bulk)
			}
			walls, cpus = append(walls, time.Since(start)), append(cpus, cpuTime()-cpu0)
			faults = append(faults, float64(minorFaults()-f0)/float64(bulkN))
			runtime.ReadMemStats(&m1)
			allocs = append(allocs, allocated(&m0, &m1)/float64(bulkN))
			if err := retire(e, dir, err); err != nil {
				return err
			}
		}
		res.add("bulk-10k-x10", "services_per_s_"+how, float64(bulkN)/median(walls).Seconds(), "services/s")
		res.add("bulk-10k-x10", "cpu_us_per_service_"+how, usPer(median(cpus), bulkN), "us")
		res.add("bulk-10k-x10", "alloc_bytes_per_service_"+how, median(allocs), "bytes")
		res.add("bulk-10k-x10", "page_faults_per_service_"+how, median(faults), "faults")
	}

	// Once more with library latency probes running beside the batched
	// bulk (not counted in the rates above): how long a single Upsert
	// waits behind the batches. probedRounds rounds on fresh engines, each
	// with probers probes on their own frontends and backends, all the
	// time the batches run; their samples are pooled (a p99 of a few
	// hundred samples, not of the ~20 one probe takes in one round).
	during, err := probedRuns(ctx, root+"/bulk-probed", sizes, log, 0, func(e *actorlb.Engine) error {
		return forAll(chunk(bulk, bulkBatch), callers, func(c []*lb.Service) error {
			rs, err := e.UpsertBatch(ctx, c)
			return firstErr(rs, err, func(r actorlb.UpsertResult) error { return r.Err })
		})
	})
	if err != nil {
		return err
	}
	addProbed(res, "during_batches", during, bulkN)
	// What the probes cost the batches: they run in chunks while single
	// calls are about.
	res.add("bulk-10k-x10", "services_per_s_during_probes", float64(bulkN)/median(during.walls).Seconds(), "services/s")

	// Once more as one SyncSource of the whole set (a Kubernetes resync),
	// with the probes beside it: how long a single Upsert waits behind one
	// large call. The services are the Kubernetes source's, so that the
	// sync leaves the probes' own (the API's) alone.
	k8sBulk := make([]*lb.Service, len(bulk))
	for i, s := range bulk {
		k8sBulk[i] = s.DeepCopy()
		k8sBulk[i].Source = lb.SourceKubernetes
	}
	// The probes start first: the sync comes while single calls are about.
	duringSync, err := probedRuns(ctx, root+"/sync-probed", sizes, log, 5*time.Millisecond, func(e *actorlb.Engine) error {
		_, err := e.SyncSource(ctx, lb.SourceKubernetes, k8sBulk)
		return err
	})
	if err != nil {
		return err
	}
	addProbed(res, "during_sync", duringSync, bulkN)
	res.add("bulk-10k-x10", "services_per_s_sync_during_probes", float64(bulkN)/median(duringSync.walls).Seconds(), "services/s")

	// Bulk again with one Upsert call per service, the latency probes
	// running alongside: singleRounds rounds on fresh engines and maps,
	// their medians reported and the probes' samples pooled. The last
	// round's engine is the one the memory, restore and step figures
	// come from.
	engRoot := root + "/engine"
	var singles []singleRound
	var e *actorlb.Engine
	var before uint64
	for round := range singleRounds {
		last := round == singleRounds-1
		dir := fmt.Sprintf("%s/single-%d", root, round)
		if last {
			dir = engRoot
		}
		e, err = actorlb.New(ctx, engineConfig(dir, sizes, log))
		if err != nil {
			return err
		}
		var stop func()
		if last {
			before = heapAfterGC()
			stop = profileBulk() // the last round alone
		} else {
			runtime.GC() // as the last round's heapAfterGC does
		}
		r, err := singleCallRound(ctx, e, bulk, callers, log)
		if stop != nil {
			stop()
		}
		if !last || err != nil {
			if err := retire(e, dir, err); err != nil {
				return err
			}
		}
		singles = append(singles, r)
	}
	sr := pooledSingleRounds(singles)
	rate := float64(bulkN) / sr.wall.Seconds()
	res.add("bulk-10k-x10", "services_per_s_single_calls", rate, "services/s")
	res.add("bulk-10k-x10", "ratio_to_put_floor_single_calls", putFloor.Seconds()/sr.wall.Seconds(), "x")
	res.add("bulk-10k-x10", "ratio_to_put_floor_single_calls_min", putFloor.Seconds()/sr.slowest.Seconds(), "x")
	res.add("bulk-10k-x10", "ratio_to_put_floor_single_calls_max", putFloor.Seconds()/sr.fastest.Seconds(), "x")
	res.add("bulk-10k-x10", "ratio_to_batch_floor_single_calls", batchFloor.Seconds()/sr.wall.Seconds(), "x")
	res.add("bulk-10k-x10", "cpu_us_per_service_single_calls", usPer(sr.cpu, bulkN), "us")
	res.add("bulk-10k-x10", "gc_cpu_us_per_service_single_calls", usPer(sr.gc, bulkN), "us")
	res.add("bulk-10k-x10", "allocs_per_service", sr.mallocs/float64(bulkN), "allocs")
	res.add("bulk-10k-x10", "alloc_bytes_per_service", sr.allocBytes/float64(bulkN), "bytes")
	res.add("bulk-10k-x10", "requests_per_child_message", float64(sr.requests)/float64(max(1, sr.childMessages)), "requests")
	for _, step := range []struct{ name, metric string }{
		{engine.StepQueued, "step_us_queued"}, {engine.StepAcquire, "step_us_acquire"},
		{engine.StepWriteBackends, "step_us_backends_revnat"}, {engine.StepWriteService, "step_us_service"},
	} {
		if t := sr.steps[step.name]; t.Count > 0 {
			res.add("bulk-10k-x10", step.metric, usPer(t.Total, int(t.Count)), "us")
		}
	}
	res.add("bulk-10k-x10", "cores_busy", sr.cpu.Seconds()/sr.wall.Seconds(), "cores")
	res.add("bulk-10k-x10", "single_call_rounds", float64(len(singles)), "count")
	probe, restProbe := &latencyProbe{samples: sr.probe}, &latencyProbe{samples: sr.rest}
	res.add("upsert-latency", "p50_us_library", probe.p(50), "us")
	res.add("upsert-latency", "p90_us_library", probe.p(90), "us")
	res.add("upsert-latency", "p99_us_library", probe.p(99), "us")
	res.add("upsert-latency", "max_us_library", probe.p(100), "us")
	res.add("upsert-latency", "samples_library", float64(len(probe.samples)), "count")
	res.add("upsert-latency", "sched_wait_p50_us_single_calls", sr.sched.quantile(0.50), "us")
	res.add("upsert-latency", "sched_wait_p99_us_single_calls", sr.sched.quantile(0.99), "us")
	res.add("upsert-latency", "sched_wait_p999_us_single_calls", sr.sched.quantile(0.999), "us")
	res.add("upsert-latency", "p50_us_rest", restProbe.p(50), "us")
	res.add("upsert-latency", "p99_us_rest", restProbe.p(99), "us")
	res.add("upsert-latency", "max_us_rest", restProbe.p(100), "us")
	res.add("upsert-latency", "samples_rest", float64(len(restProbe.samples)), "count")

	// bulk stays live until measured: the heap before held it, and a slice
	// the collector frees once its last use is past would come off the
	// engine's figure (by some 825 bytes per service).
	res.add("memory-10k-x10", "retained_bytes_per_service", retainedPer(before, bulkN), "bytes")
	runtime.KeepAlive(bulk)
	if heapProfile != "" {
		if err := writeHeapProfile(heapProfile); err != nil {
			return err
		}
	}
	if err := e.Close(); err != nil {
		return err
	}

	// Restore on the maps the bulk scenario left: three warm restarts, each
	// after a raw batched dump (the floor) and a typed dump of the same maps;
	// the medians are reported (one restart and one dump vary by ±20% on a
	// small VM).
	var readies, dumps, typed, readyCPU, dumpCPU []time.Duration
	var recWall, recCPU []time.Duration
	var recAlloc []float64
	var warmFaults, warmAllocs []float64
	recRepairs := 0
	var besideRec latencyProbe // single upserts while reconciles run back to back
	recsBeside := 0
	restoreSteps := map[string][]time.Duration{}
	var writes float64
	var restored int
	stopProfile := profileTo(restoreProfile)
	for range 3 {
		dumpTime, dumpCPUTime, err := batchDumpTime(engRoot, sizes)
		if err != nil {
			return err
		}
		dumpCPU = append(dumpCPU, dumpCPUTime)
		typedTime, err := typedDumpTime(engRoot, sizes)
		if err != nil {
			return err
		}
		typed = append(typed, typedTime)
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		f0, cpu0 := minorFaults(), cpuTime()
		start := time.Now()
		e, err = actorlb.New(ctx, engineConfig(engRoot, sizes, log))
		if err != nil {
			return err
		}
		ready := time.Since(start)
		readyCPU = append(readyCPU, cpuTime()-cpu0)
		warmFaults = append(warmFaults, float64(minorFaults()-f0))
		runtime.ReadMemStats(&m1)
		warmAllocs = append(warmAllocs, allocated(&m0, &m1)/(1<<20))
		st, err := e.Stats(ctx)
		if err != nil {
			return err
		}
		// One reconcile of the restored maps (nothing to repair): what the
		// periodic drift check costs at this size, and what it allocates.
		var r0, r1 runtime.MemStats
		runtime.ReadMemStats(&r0)
		cpu0, t0 := cpuTime(), time.Now()
		ds, err := e.Reconcile(ctx)
		if err != nil {
			return err
		}
		recWall, recCPU = append(recWall, time.Since(t0)), append(recCPU, cpuTime()-cpu0)
		runtime.ReadMemStats(&r1)
		recAlloc = append(recAlloc, allocated(&r0, &r1)/(1<<20))
		for _, d := range ds {
			recRepairs += d.Repairs()
		}
		n, err := upsertsBesideReconciles(ctx, e, &besideRec)
		if err != nil {
			return err
		}
		recsBeside += n
		if err := e.Close(); err != nil {
			return err
		}
		for name, t := range st.Steps {
			restoreSteps[name] = append(restoreSteps[name], t.Total)
		}
		readies, dumps = append(readies, ready), append(dumps, dumpTime)
		writes = max(writes, float64(st.MapWrites()))
		restored = st.Restore.Services
	}
	stopProfile()
	ready, dumpTime := median(readies), median(dumps)
	res.add("restore-10k-x10", "ready_ms", float64(ready.Microseconds())/1000, "ms")
	res.add("restore-10k-x10", "batch_dump_ms", float64(dumpTime.Microseconds())/1000, "ms")
	res.add("restore-10k-x10", "ratio_to_batch_dump", ready.Seconds()/dumpTime.Seconds(), "x")
	res.add("restore-10k-x10", "batch_dump_cpu_ms", float64(median(dumpCPU).Microseconds())/1000, "ms")
	addRestoreCPU(res, readyCPU, readies, "")
	res.add("restore-10k-x10", "typed_dump_ms", float64(median(typed).Microseconds())/1000, "ms")
	res.add("restore-10k-x10", "ratio_to_typed_dump", ready.Seconds()/median(typed).Seconds(), "x")
	res.add("restore-10k-x10", "page_faults", median(warmFaults), "faults")
	// What a restore allocates: in a new process every byte of it is a
	// first write of fresh memory (the new-process rows allocate the
	// same, and with huge pages a 64 MiB buffer besides, never written).
	res.add("restore-10k-x10", "alloc_mib", median(warmAllocs), "MiB")
	addRestoreSteps(res, restoreSteps, "")
	res.add("reconcile-10k-x10", "ms", float64(median(recWall).Microseconds())/1000, "ms")
	res.add("reconcile-10k-x10", "cpu_ms", float64(median(recCPU).Microseconds())/1000, "ms")
	res.add("reconcile-10k-x10", "ratio_to_batch_dump", median(recWall).Seconds()/dumpTime.Seconds(), "x")
	res.add("reconcile-10k-x10", "alloc_mib", median(recAlloc), "MiB")
	res.add("reconcile-10k-x10", "repairs", float64(recRepairs), "entries")
	slices.Sort(besideRec.samples)
	res.add("reconcile-10k-x10", "upsert_p50_us_beside", besideRec.p(50), "us")
	res.add("reconcile-10k-x10", "upsert_p99_us_beside", besideRec.p(99), "us")
	res.add("reconcile-10k-x10", "upsert_max_us_beside", besideRec.p(100), "us")
	res.add("reconcile-10k-x10", "upsert_samples_beside", float64(len(besideRec.samples)), "count")
	res.add("reconcile-10k-x10", "reconciles_beside", float64(recsBeside), "count")
	res.add("restore-10k-x10", "map_writes", writes, "entries")
	res.add("restore-10k-x10", "services", float64(restored), "count")
	if err := newProcessRestores(res, engRoot, restored, 3); err != nil {
		return err
	}
	if err := maps.Remove(engRoot); err != nil {
		return err
	}

	// The memory figure again for IPv6 services and backends (their keys
	// do not pack).
	v6, err := retainedV6(ctx, root+"/v6", sizes, bulkN, callers, false, log)
	if err != nil {
		return err
	}
	res.add("memory-10k-x10", "retained_bytes_per_service_ipv6", v6, "bytes")
	v6spread, err := retainedV6(ctx, root+"/v6spread", sizes, bulkN, callers, true, log)
	if err != nil {
		return err
	}
	res.add("memory-10k-x10", "retained_bytes_per_service_ipv6_spread", v6spread, "bytes")

	// Single calls one after the other on a quiet engine, with and
	// without the ID lease.
	if err := sequential(res, root+"/sequential", sizes, log); err != nil {
		return err
	}

	// An endpoint change on every service of the bulk.
	if err := endpointChange(res, root+"/update", sizes, bulk, callers, bulkBatch, log); err != nil {
		return err
	}

	// Upstream-comparable: insert then delete single-backend services.
	return insertDelete(res, root+"/insert", sizes, insertN, callers, batch, log)
}

var bulkBatch int

// kube and kubeOnly are the Kubernetes scenarios' flags.
var (
	kube     kubeOptions
	kubeOnly bool
	// packetOnly runs the packet-datapath scenarios alone.
	packetOnly bool
)

var heapProfile, heapProfileV6, heapProfileV6Spread string

// writeHeapProfile writes the in-use heap profile to file.
func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var bulkProfile, batchedProfile, insertProfile, restoreProfile, updateProfile string

// maglevOnly runs the Maglev scenarios alone (--maglev-only).
var maglevOnly bool

// profileBulk starts the CPU profile of --cpuprofile-bulk; the returned
// function stops it.
func profileBulk() func() { return profileTo(bulkProfile) }

// profileTo starts a CPU profile written to file ("": none); the returned
// function stops it.
func profileTo(file string) func() {
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// gcCPUTime is the runtime's estimate of the CPU time its collector has
// taken so far (marking in the background and in assists, pauses): the
// part of cpuTime the garbage collector is.
func gcCPUTime() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	user, system := cpuSplit()
	return user + system
}

// cpuSplit returns the process's user and system CPU time so far.
func cpuSplit() (user, system time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func print(rows []Row) {
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "scenario\tmetric\tvalue\tunit")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%.4g\t%s\n", r.Scenario, r.Metric, r.Value, r.Unit)
	}
	w.Flush()
}

// retainedV6 is the heap retained per service by n IPv6 services of 10
// IPv6 backends, upserted one call each (as for memory-10k-x10) on a fresh
// engine.
// With spread, every backend address is in a /104 prefix of its own and
// every frontend in a /96 of its own (the indexes' learnt prefixes do not
// help: the worst case); else backends share a /104 and frontends a /96,
// as a node's pods and a service range do.
func retainedV6(ctx context.Context, dir string, sizes maps.Sizes, n, callers int, spread bool, log *logrus.Logger) (float64, error) {
	svcs := benchset.Sequential(n, 10)
	for _, s := range svcs {
		f := s.Frontend.Addr.As4()
		s.Frontend.Addr = netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x96, 12: f[2], 13: f[3]})
		if spread {
			s.Frontend.Addr = netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x96, 10: f[2], 11: f[3]})
		}
		for i := range s.Backends {
			a := s.Backends[i].Addr.As4()
			s.Backends[i].Addr = netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x01, 12: a[0], 13: a[1], 14: a[2], 15: a[3]})
			if spread {
				s.Backends[i].Addr = netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x01, 9: a[0], 10: a[1], 11: a[2], 12: a[3]})
			}
		}
	}
	e, err := actorlb.New(ctx, engineConfig(dir, sizes, log))
	if err != nil {
		return 0, err
	}
	before := heapAfterGC()
	if err := upsertAll(ctx, e, svcs, callers); err != nil {
		e.Close()
		return 0, err
	}
	retained := retainedPer(before, n)
	runtime.KeepAlive(svcs) // the heap before held them (memory-10k-x10)
	if file := map[bool]string{false: heapProfileV6, true: heapProfileV6Spread}[spread]; file != "" {
		if err := writeHeapProfile(file); err != nil {
			e.Close()
			return 0, err
		}
	}
	if err := e.Close(); err != nil {
		return 0, err
	}
	return retained, maps.Remove(dir)
}

// entries returns the raw map contents the engine writes for svcs
// (service IDs and backend IDs assigned in order).
func entries(svcs []*lb.Service) (svc []maps.ServiceEntry, be []maps.BackendEntry, rev []maps.RevNATEntry) {
	var beID lb.BackendID
	for i, s := range svcs {
		t := &table.Service{Spec: *s}
		t.Spec.Frontend.ID = lb.ServiceID(i%65535 + 1)
		for range s.Backends {
			beID++
			t.BackendIDs = append(t.BackendIDs, beID)
		}
		be = append(be, table.BackendEntries(t)...)
		svc = append(svc, table.Slots(t)...)
		svc = append(svc, table.Master(t))
		rev = append(rev, table.RevNAT(t))
	}
	return svc, be, rev
}

type rawMap struct {
	m    *ebpf.Map
	keys [][]byte
	vals [][]byte
}

// batchedRound is what one round of batchedBulkRound took: wall time,
// CPU time (user, system and their sum), the collector's CPU time, minor
// page faults, and bytes allocated per service.
type batchedRound struct {
	wall, cpu, user, sys, gc time.Duration
	faults, allocs           float64
}

// medianRounds returns the median of each figure of rs.
func medianRounds(rs []batchedRound) batchedRound {
	return batchedRound{
		wall:   medianOf(rs, func(r batchedRound) time.Duration { return r.wall }),
		cpu:    medianOf(rs, func(r batchedRound) time.Duration { return r.cpu }),
		user:   medianOf(rs, func(r batchedRound) time.Duration { return r.user }),
		sys:    medianOf(rs, func(r batchedRound) time.Duration { return r.sys }),
		gc:     medianOf(rs, func(r batchedRound) time.Duration { return r.gc }),
		faults: medianOf(rs, func(r batchedRound) float64 { return r.faults }),
		allocs: medianOf(rs, func(r batchedRound) float64 { return r.allocs }),
	}
}

// medianOf is the median of figure f over rs.
func medianOf[R any, T cmp.Ordered](rs []R, f func(R) T) T {
	v := make([]T, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return median(v)
}

// batchedBulkRound upserts svcs through UpsertBatch calls of batch
// services from callers goroutines into a fresh engine with its pins
// under dir, which it removes after. Its CPU profile samples carry the
// label layout.
func batchedBulkRound(ctx context.Context, dir string, sizes maps.Sizes, log *logrus.Logger, svcs []*lb.Service, callers, batch int, layout string) (r batchedRound, err error) {
	pprof.Do(ctx, pprof.Labels("layout", layout), func(ctx context.Context) {
		var e *actorlb.Engine
		e, err = actorlb.New(ctx, engineConfig(dir, sizes, log))
		if err != nil {
			return
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		u0, s0 := cpuSplit()
		gc0, f0, start := gcCPUTime(), minorFaults(), time.Now()
		err = forAll(chunk(svcs, batch), callers, func(c []*lb.Service) error {
			rs, err := e.UpsertBatch(ctx, c)
			return firstErr(rs, err, func(r actorlb.UpsertResult) error { return r.Err })
		})
		r.wall = time.Since(start)
		u1, s1 := cpuSplit()
		r.cpu, r.user, r.sys = u1-u0+s1-s0, u1-u0, s1-s0
		r.gc, r.faults = gcCPUTime()-gc0, float64(minorFaults()-f0)
		runtime.ReadMemStats(&m1)
		r.allocs = allocated(&m0, &m1) / float64(len(svcs))
		err = retire(e, dir, err)
	})
	return r, err
}

// floorTimes are the floors' wall and CPU times.
type floorTimes struct {
	put, batch       time.Duration
	putCPU, batchCPU time.Duration
	// The batched passes' user and system CPU (medians of each).
	batchUser, batchSys time.Duration
}

// floorsCPU writes the entries of svcs straight to fresh maps, one
// bpf() call per entry (put) and then one BatchUpdate per map (batch,
// three passes), and returns the wall and CPU time of the put pass and
// the medians of the batched ones.
func floorsCPU(root string, sizes maps.Sizes, svcs []*lb.Service) (f floorTimes, err error) {
	svc, be, rev := entries(svcs)
	var raws []rawMap
	// Pass 0 puts one entry per system call; passes 1-3 write in batches,
	// on fresh maps each time, and the median counts: a batched pass takes
	// some 60 ms, its CPU time read 5.4 to 9.3 us per service from one
	// harness run to the next, and the batched bulk it is compared with
	// is a median of three rounds too.
	var batchTimes, batchCPUs, batchUser, batchSys []time.Duration
	for pass := range 4 {
		dir := fmt.Sprintf("%s/floor%d", root, pass)
		lbm, err := maps.Open(maps.Config{Root: dir, MaxEntries: sizes})
		if err != nil {
			return f, err
		}
		lbm.Close()
		raws = raws[:0]
		bk, bv := marshalBackends(be)
		sk, sv := marshalServices(svc)
		rk, rv := marshalRevNAT(rev)
		for _, x := range []struct {
			name string
			k, v [][]byte
		}{{maps.Backend4Name, bk, bv}, {maps.Service4Name, sk, sv}, {maps.RevNAT4Name, rk, rv}} {
			m, err := ebpf.LoadPinnedMap(dir+"/"+x.name, nil)
			if err != nil {
				return f, err
			}
			raws = append(raws, rawMap{m, x.k, x.v})
		}
		u0, s0 := cpuSplit()
		start := time.Now()
		for _, r := range raws {
			if pass == 0 {
				for i := range r.keys {
					if err := r.m.Put(r.keys[i], r.vals[i]); err != nil {
						return f, err
					}
				}
			} else if err := batchPut(r); err != nil {
				return f, err
			}
		}
		d := time.Since(start)
		u1, s1 := cpuSplit()
		cpu := u1 - u0 + s1 - s0
		for _, r := range raws {
			r.m.Close()
		}
		if pass == 0 {
			f.put, f.putCPU = d, cpu
		} else {
			batchTimes, batchCPUs = append(batchTimes, d), append(batchCPUs, cpu)
			batchUser, batchSys = append(batchUser, u1-u0), append(batchSys, s1-s0)
		}
		if err := maps.Remove(dir); err != nil {
			return f, err
		}
	}
	f.batch, f.batchCPU = median(batchTimes), median(batchCPUs)
	f.batchUser, f.batchSys = median(batchUser), median(batchSys)
	return f, nil
}

func batchPut(r rawMap) error {
	ks := slices.Concat(r.keys...)
	vs := slices.Concat(r.vals...)
	n := len(r.keys)
	ksz, vsz := len(r.keys[0]), len(r.vals[0])
	// BatchUpdate wants slices of fixed-size elements: hand it byte arrays.
	switch {
	case ksz == 4 && vsz == 12:
		_, err := r.m.BatchUpdate(asArrays[[4]byte](ks, n), asArrays[[12]byte](vs, n), nil)
		return err
	case ksz == 12 && vsz == 12:
		_, err := r.m.BatchUpdate(asArrays[[12]byte](ks, n), asArrays[[12]byte](vs, n), nil)
		return err
	case ksz == 2 && vsz == 6:
		_, err := r.m.BatchUpdate(asArrays[[2]byte](ks, n), asArrays[[6]byte](vs, n), nil)
		return err
	}
	return errors.New("batch floor: unexpected sizes")
}

func asArrays[T any](b []byte, n int) []T {
	out := make([]T, n)
	sz := len(b) / n
	for i := range out {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[i])), sz), b[i*sz:(i+1)*sz])
	}
	return out
}

func marshalServices(es []maps.ServiceEntry) (k, v [][]byte) {
	for _, e := range es {
		kb, _ := maps.MarshalService4Key(e.Key)
		vb := maps.MarshalServiceValue(e.Value)
		k, v = append(k, kb[:]), append(v, vb[:])
	}
	return k, v
}

func marshalBackends(es []maps.BackendEntry) (k, v [][]byte) {
	for _, e := range es {
		kb := maps.MarshalBackendKey(e.ID)
		vb, _ := maps.MarshalBackend4(e.Value)
		k, v = append(k, kb[:]), append(v, vb[:])
	}
	return k, v
}

func marshalRevNAT(es []maps.RevNATEntry) (k, v [][]byte) {
	for _, e := range es {
		kb := maps.MarshalRevNATKey(e.ID)
		vb, _ := maps.MarshalRevNAT4(e.Value)
		k, v = append(k, kb[:]), append(v, vb[:])
	}
	return k, v
}

// batchDumpTime is the raw batched dump of the six maps at root: batch
// lookups into byte buffers, nothing decoded. It returns the dump's wall
// time and the process's CPU time meanwhile.
func batchDumpTime(root string, _ maps.Sizes) (wall, cpu time.Duration, err error) {
	var ms []*ebpf.Map
	defer func() {
		for _, m := range ms {
			m.Close()
		}
	}()
	for _, name := range []string{maps.Service4Name, maps.Backend4Name, maps.RevNAT4Name, maps.Service6Name, maps.Backend6Name, maps.RevNAT6Name} {
		m, err := ebpf.LoadPinnedMap(root+"/"+name, nil)
		if err != nil {
			return 0, 0, err
		}
		ms = append(ms, m)
	}
	cpu0, start := cpuTime(), time.Now()
	for _, m := range ms {
		var err error
		switch ks, vs := m.KeySize(), m.ValueSize(); {
		case ks == 12 && vs == 12:
			err = rawDump[[12]byte, [12]byte](m)
		case ks == 24 && vs == 12:
			err = rawDump[[24]byte, [12]byte](m)
		case ks == 4 && vs == 12:
			err = rawDump[[4]byte, [12]byte](m)
		case ks == 4 && vs == 24:
			err = rawDump[[4]byte, [24]byte](m)
		case ks == 2 && vs == 6:
			err = rawDump[[2]byte, [6]byte](m)
		case ks == 2 && vs == 18:
			err = rawDump[[2]byte, [18]byte](m)
		default:
			err = fmt.Errorf("raw dump: %s: unexpected key/value sizes %d/%d", m, ks, vs)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return time.Since(start), cpuTime() - cpu0, nil
}

// typedDumpTime dumps the six maps at root through the maps package: batch
// lookups decoded into typed entries (what any restore must at least do
// to read the entries).
func typedDumpTime(root string, sizes maps.Sizes) (time.Duration, error) {
	lbm, err := maps.Open(maps.Config{Root: root, MaxEntries: sizes})
	if err != nil {
		return 0, err
	}
	defer lbm.Close()
	start := time.Now()
	for _, f := range []maps.Family{maps.IPv4, maps.IPv6} {
		if _, err := lbm.Services(f).Dump(); err != nil {
			return 0, err
		}
		if _, err := lbm.Backends(f).Dump(); err != nil {
			return 0, err
		}
		if _, err := lbm.RevNAT(f).Dump(); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// rawDump reads every entry of m with batch lookups of 4,096.
func rawDump[K, V any](m *ebpf.Map) error {
	var c ebpf.MapBatchCursor
	kb, vb := make([]K, 4096), make([]V, 4096)
	for {
		_, err := m.BatchLookup(&c, kb, vb, nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// forAll runs do on every service from callers goroutines.
func forAll[T any](svcs []T, callers int, do func(T) error) error {
	return forEach(len(svcs), callers, func(i int) error { return do(svcs[i]) })
}

// forEach calls do(i) for every i in [0, n) from callers goroutines, each
// taking the next i; a goroutine stops at its first error, and the first
// error is returned.
func forEach(n, callers int, do func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func upsertAll(ctx context.Context, e *actorlb.Engine, svcs []*lb.Service, callers int) error {
	return forAll(svcs, callers, func(s *lb.Service) error {
		_, _, err := e.Upsert(ctx, s)
		return err
	})
}

func deleteAll(ctx context.Context, e *actorlb.Engine, svcs []*lb.Service, callers int) error {
	return forAll(svcs, callers, func(s *lb.Service) error {
		_, err := e.DeleteByFrontend(ctx, s.Frontend.L3n4Addr)
		return err
	})
}

func insertDelete(res *results, root string, sizes maps.Sizes, n, callers, batch int, log *logrus.Logger) error {
	ctx := context.Background()
	svcs := make([]*lb.Service, n)
	for i := range n {
		svcs[i] = &lb.Service{
			Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)}), Port: uint16(80 + i>>16), Protocol: lb.TCP}},
			Backends: []lb.Backend{{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), Port: uint16(8080 + i>>16), Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight}},
		}
	}
	chunks := chunk(svcs, batch)
	fl, err := floorsCPU(root+"-floor", sizes, svcs)
	if err != nil {
		return err
	}
	insFloor := fl.batch
	fresh := func(dir string) (*actorlb.Engine, func() error, error) {
		e, err := actorlb.New(ctx, engineConfig(dir, sizes, log))
		if err != nil {
			return nil, nil, err
		}
		return e, func() error {
			if err := e.Close(); err != nil {
				return err
			}
			return maps.Remove(dir)
		}, nil
	}

	// As upstream's benchmark does (its services reach the datapath in
	// reconciler batches), through UpsertBatch/DeleteBatch: callers
	// goroutines, batch services per call. Three rounds, each on a fresh
	// engine and fresh maps; the medians are reported.
	var inss, dels, insCPUs, insUser, insSys []time.Duration
	var retained []float64
	stopProfile := profileTo(insertProfile)
	for round := range 3 {
		e, done, err := fresh(fmt.Sprintf("%s-%d", root, round))
		if err != nil {
			return err
		}
		before := heapAfterGC()
		u0, s0 := cpuSplit()
		start := time.Now()
		if err := forAll(chunks, callers, func(c []*lb.Service) error {
			rs, err := e.UpsertBatch(ctx, c)
			return firstErr(rs, err, func(r actorlb.UpsertResult) error { return r.Err })
		}); err != nil {
			return err
		}
		inss = append(inss, time.Since(start))
		u1, s1 := cpuSplit()
		insCPUs = append(insCPUs, u1-u0+s1-s0)
		insUser, insSys = append(insUser, u1-u0), append(insSys, s1-s0)
		retained = append(retained, retainedPer(before, n))
		runtime.KeepAlive(svcs) // the heap before held them (memory-10k-x10)
		start = time.Now()
		if err := forAll(chunks, callers, func(c []*lb.Service) error {
			fes := make([]lb.L3n4Addr, len(c))
			for i, s := range c {
				fes[i] = s.Frontend.L3n4Addr
			}
			rs, err := e.DeleteBatch(ctx, fes)
			return firstErr(rs, err, func(r actorlb.DeleteResult) error { return r.Err })
		}); err != nil {
			return err
		}
		dels = append(dels, time.Since(start))
		if err := done(); err != nil {
			return err
		}
	}
	stopProfile()
	res.add("insert-50k-x1", "services_per_s", float64(n)/median(inss).Seconds(), "services/s")
	res.add("insert-50k-x1", "batch_floor_services_per_s", float64(n)/insFloor.Seconds(), "services/s")
	res.add("insert-50k-x1", "ratio_to_batch_floor", insFloor.Seconds()/median(inss).Seconds(), "x")
	// CPU beside the rates: the engine's per service (the medians of the
	// rounds, user and system apart), the batch floor's for the same
	// entries, and the cores the engine kept busy (CPU over wall, as the
	// median round).
	res.add("insert-50k-x1", "cpu_us_per_service", usPer(median(insCPUs), n), "us")
	res.add("insert-50k-x1", "user_cpu_us_per_service", usPer(median(insUser), n), "us")
	res.add("insert-50k-x1", "system_cpu_us_per_service", usPer(median(insSys), n), "us")
	res.add("insert-50k-x1", "batch_floor_cpu_us_per_service", usPer(fl.batchCPU, n), "us")
	res.add("insert-50k-x1", "cpu_ratio_to_batch_floor", median(insCPUs).Seconds()/fl.batchCPU.Seconds(), "x")
	res.add("insert-50k-x1", "cores_busy", median(insCPUs).Seconds()/median(inss).Seconds(), "cores")
	res.add("insert-50k-x1", "delete_services_per_s", float64(n)/median(dels).Seconds(), "services/s")
	res.add("insert-50k-x1", "retained_bytes_per_service", median(retained), "bytes")

	// The same, one Upsert / DeleteByFrontend call per service: three
	// rounds on fresh engines and maps, medians reported (one pass varies
	// by more than the differences it is read for).
	var singleIns, singleDels []time.Duration
	for round := range 3 {
		e, done, err := fresh(fmt.Sprintf("%s-single-%d", root, round))
		if err != nil {
			return err
		}
		start := time.Now()
		if err := upsertAll(ctx, e, svcs, callers); err != nil {
			return err
		}
		singleIns = append(singleIns, time.Since(start))
		start = time.Now()
		if err := deleteAll(ctx, e, svcs, callers); err != nil {
			return err
		}
		singleDels = append(singleDels, time.Since(start))
		if err := done(); err != nil {
			return err
		}
	}
	res.add("insert-50k-x1", "services_per_s_single_calls", float64(n)/median(singleIns).Seconds(), "services/s")
	res.add("insert-50k-x1", "delete_services_per_s_single_calls", float64(n)/median(singleDels).Seconds(), "services/s")
	return nil
}

// heapAfterGC collects garbage and returns the bytes left on the heap.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// retainedPer is the heap grown since before (a heapAfterGC), after
// collecting garbage, per each of n services.
func retainedPer(before uint64, n int) float64 {
	return float64(int64(heapAfterGC())-int64(before)) / float64(n)
}

// noReconcile keeps the periodic reconcile out of the scenarios' figures
// (its cost is measured alone: reconcile-10k-x10).
const noReconcile = -1

// addRestoreSteps adds the median time of each restore step in steps (by
// step name) as restore-10k-x10's step_ms_* rows, their names ending in
// suffix.
func addRestoreSteps(res *results, steps map[string][]time.Duration, suffix string) {
	for _, step := range []struct{ name, metric string }{
		{engine.StepDumpMaps, "step_ms_dump"}, {engine.StepRebuild, "step_ms_rebuild"}, {engine.StepInstall, "step_ms_install"},
	} {
		if ts := steps[step.name]; len(ts) > 0 {
			res.add("restore-10k-x10", step.metric+suffix, float64(median(ts).Microseconds())/1000, "ms")
		}
	}
}

// engineConfig is the configuration of the scenarios' engines: pins under
// dir, no periodic reconcile.
func engineConfig(dir string, sizes maps.Sizes, log *logrus.Logger) actorlb.Config {
	return actorlb.Config{BPFRoot: dir, MaxEntries: sizes, Logger: log, ReconcileInterval: noReconcile}
}

// retire closes e and removes its maps under dir, once a round that ended
// with err (nil: it went well) is done with it. It returns err if set,
// else the first error of the close or the removal; the maps stay when
// either failed.
func retire(e *actorlb.Engine, dir string, err error) error {
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return maps.Remove(dir)
}

// usPer is d in microseconds (whole ones, as Duration.Microseconds
// gives) per one of n: the CPU rows' "µs per service".
func usPer(d time.Duration, n int) float64 {
	return float64(d.Microseconds()) / float64(n)
}

// allocated returns the bytes allocated between two readings of the
// memory statistics.
func allocated(before, after *runtime.MemStats) float64 {
	return float64(after.TotalAlloc - before.TotalAlloc)
}

// median returns the median of xs.
func median[T cmp.Ordered](xs []T) T {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func chunk[T any](xs []T, n int) [][]T {
	var out [][]T
	for len(xs) > 0 {
		k := min(n, len(xs))
		out = append(out, xs[:k])
		xs = xs[k:]
	}
	return out
}

// firstErr returns err, or the first error among the results.
func firstErr[R any](rs []R, err error, get func(R) error) error {
	if err != nil {
		return err
	}
	for _, r := range rs {
		if e := get(r); e != nil {
			return e
		}
	}
	return nil
}

// latencyProbe upserts one 10-backend service in a loop and records how
// long each call takes (startLatencyProbes: several such loops, each on
// its own service).
type latencyProbe struct {
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []time.Duration
}

// The probes beside the batched bulk: rounds on fresh engines, probe
// loops in each.
const (
	probedRounds = 3
	probers      = 4
)

func startLatencyProbe(e *actorlb.Engine) *latencyProbe { return startLatencyProbes(e, 1) }

// probeService is the service of probe loop k: frontend 10.95.0.(k+1)
// with backends 10.94.k.1-10 of its own (no queue shared with another
// loop or the bulk).
func probeService(k int) *lb.Service {
	svc := benchset.Sequential(1, 10)[0]
	svc.Frontend.Addr = netip.AddrFrom4([4]byte{10, 95, 0, byte(k + 1)})
	for i := range svc.Backends {
		svc.Backends[i].Addr = netip.AddrFrom4([4]byte{10, 94, byte(k), byte(i + 1)})
	}
	return svc
}

// startLatencyProbes runs n probe loops, loop k upserting probeService(k).
func startLatencyProbes(e *actorlb.Engine, n int) *latencyProbe {
	p := &latencyProbe{done: make(chan struct{})}
	for k := range n {
		svc := probeService(k)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx := context.Background()
			var samples []time.Duration
			defer func() {
				p.mu.Lock()
				p.samples = append(p.samples, samples...)
				p.mu.Unlock()
			}()
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-p.done:
					return
				default:
				}
				// Alternate two backend sets so that every call writes.
				s := svc.DeepCopy()
				if i%2 == 1 {
					s.Backends = s.Backends[:9]
				}
				t := time.Now()
				if _, _, err := e.Upsert(ctx, s); err != nil {
					return
				}
				samples = append(samples, time.Since(t))
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return p
}

func (p *latencyProbe) stop() *latencyProbe {
	close(p.done)
	p.wg.Wait()
	slices.Sort(p.samples)
	return p
}

// p returns the q-th percentile in microseconds.
func (p *latencyProbe) p(q float64) float64 {
	if len(p.samples) == 0 {
		return 0
	}
	i := int(q / 100 * float64(len(p.samples)-1))
	return float64(p.samples[i].Nanoseconds()) / 1000
}

// serveREST serves the API for e on a unix socket and returns a client.
func serveREST(e *actorlb.Engine, socket string, log *logrus.Logger) (*api.Server, *api.Client, error) {
	srv, err := api.NewServer(api.Config{Engine: e, Log: logrus.NewEntry(log), BPFRoot: e.BPFRoot()})
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, nil, err
	}
	go srv.Serve(l)
	c, err := api.NewClient("unix://" + socket)
	if err != nil {
		return nil, nil, err
	}
	return srv, c, nil
}

// startRESTProbe does what startLatencyProbe does, through PUT
// /v1/service/{id} on the agent's API.
func startRESTProbe(c *api.Client) *latencyProbe {
	p := &latencyProbe{done: make(chan struct{})}
	spec := func(n int) *api.ServiceSpec {
		s := &api.ServiceSpec{ID: 65000, FrontendAddress: &api.FrontendAddress{IP: "10.95.0.2", Port: 80}}
		for i := range n {
			s.BackendAddresses = append(s.BackendAddresses, api.BackendAddress{IP: fmt.Sprintf("10.94.1.%d", i+1), Port: 8080})
		}
		return s
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx := context.Background()
		for i := 0; i < 1_000_000; i++ {
			select {
			case <-p.done:
				return
			default:
			}
			t := time.Now()
			if _, _, err := c.PutService(ctx, 65000, spec(10-i%2)); err != nil {
				return
			}
			p.samples = append(p.samples, time.Since(t))
			time.Sleep(time.Millisecond)
		}
	}()
	return p
}

// probedRuns runs work probedRounds times, each on a fresh engine with
// maps under dir-<round>, with probers latency probes running from lead
// before work starts until it returns. It returns the probes' samples,
// pooled and sorted, and per round work's wall time, the collections
// that ran meanwhile and the bytes allocated (probes included).
func probedRuns(ctx context.Context, dir string, sizes maps.Sizes, log *logrus.Logger, lead time.Duration, work func(*actorlb.Engine) error) (pr probed, err error) {
	for round := range probedRounds {
		d := fmt.Sprintf("%s-%d", dir, round)
		e, err := actorlb.New(ctx, engineConfig(d, sizes, log))
		if err != nil {
			return pr, err
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		lat := startLatencyProbes(e, probers)
		time.Sleep(lead)
		start := time.Now()
		err = work(e)
		pr.walls = append(pr.walls, time.Since(start))
		pr.samples = append(pr.samples, lat.stop().samples...)
		runtime.ReadMemStats(&m1)
		pr.gcs = append(pr.gcs, float64(m1.NumGC-m0.NumGC))
		pr.allocs = append(pr.allocs, allocated(&m0, &m1))
		if err := retire(e, d, err); err != nil {
			return pr, err
		}
	}
	slices.Sort(pr.samples)
	return pr, nil
}

// probed is what probedRuns measured: the probes' samples, and per round
// the work's wall time, the collections and the bytes allocated.
type probed struct {
	samples, walls []time.Duration
	gcs, allocs    []float64
}

// addProbed adds the upsert-latency rows of pr for n services a round:
// the probes' p50, p99 and max in microseconds, and their count, named
// <quantity>_us_library_<suffix> and samples_library_<suffix>; and the
// collections and bytes allocated per round (gc_cycles_<suffix>,
// alloc_bytes_per_service_<suffix>, medians): the tail of the probes
// follows the collections (docs/performance-history.md, session 27).
func addProbed(res *results, suffix string, pr probed, n int) {
	p := &latencyProbe{samples: pr.samples}
	res.add("upsert-latency", "p50_us_library_"+suffix, p.p(50), "us")
	res.add("upsert-latency", "p99_us_library_"+suffix, p.p(99), "us")
	res.add("upsert-latency", "max_us_library_"+suffix, p.p(100), "us")
	res.add("upsert-latency", "samples_library_"+suffix, float64(len(pr.samples)), "count")
	res.add("upsert-latency", "gc_cycles_"+suffix, median(pr.gcs), "cycles")
	res.add("upsert-latency", "alloc_bytes_per_service_"+suffix, median(pr.allocs)/float64(n), "bytes")
}

// schedHist is the runtime's histogram of the time goroutines waited,
// runnable, for a processor (/sched/latencies:seconds) so far; minus
// gives the waits between two reads, quantile their distribution.
type schedHist struct {
	counts  []uint64
	buckets []float64
}

func schedLatencies() schedHist {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedHist{}
	}
	h := s[0].Value.Float64Histogram()
	return schedHist{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

func (h schedHist) minus(o schedHist) schedHist {
	d := schedHist{counts: slices.Clone(h.counts), buckets: h.buckets}
	for i := range d.counts {
		if i < len(o.counts) {
			d.counts[i] -= o.counts[i]
		}
	}
	return d
}

// quantile is the upper bound of the bucket holding quantile q (0..1),
// in microseconds; 0 when the histogram is empty.
func (h schedHist) quantile(q float64) float64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			return h.buckets[i+1] * 1e6
		}
	}
	return h.buckets[len(h.buckets)-1] * 1e6
}

// reconcilesBeside is how many reconciles of the restored 10k×10 maps run
// back to back while single upserts are timed beside them.
const reconcilesBeside = 8

// upsertsBesideReconciles times single upserts (one probe loop, as the
// probes beside the bulks) while reconcilesBeside reconciles of e's maps
// run one after the other, adds the samples to into, and deletes the
// probe's service after (so that the next restart restores the same
// maps). It returns the reconciles run.
func upsertsBesideReconciles(ctx context.Context, e *actorlb.Engine, into *latencyProbe) (int, error) {
	p := startLatencyProbe(e)
	n := 0
	var err error
	for ; n < reconcilesBeside; n++ {
		if _, err = e.Reconcile(ctx); err != nil {
			break
		}
	}
	p.stop()
	into.samples = append(into.samples, p.samples...)
	if err != nil {
		return n, err
	}
	if _, err := e.DeleteByFrontend(ctx, probeService(0).Frontend.L3n4Addr); err != nil {
		return n, fmt.Errorf("delete the probe's service: %w", err)
	}
	return n, nil
}

// singleRounds is how many rounds the single-call bulk runs, each on a
// fresh engine and maps.
const singleRounds = 3

// singleRound is what one round of the single-call bulk measured: the
// bulk's wall time, CPU and collector CPU, the goroutines' waits for a
// processor, the mallocs and bytes allocated, the engine's counters
// (requests, child messages, step timings) over the round, and the
// samples of the library and REST latency probes beside it.
type singleRound struct {
	wall, cpu, gc           time.Duration
	fastest, slowest        time.Duration // of the rounds pooled (pooledSingleRounds)
	sched                   schedHist
	mallocs, allocBytes     float64
	requests, childMessages uint64
	steps                   map[string]actorlb.StepTiming
	probe, rest             []time.Duration
}

// singleCallRound upserts bulk on e with one Upsert call per service from
// callers goroutines, with a library latency probe and a REST probe (the
// agent's API served for e on a socket of its own) running beside.
func singleCallRound(ctx context.Context, e *actorlb.Engine, bulk []*lb.Service, callers int, log *logrus.Logger) (r singleRound, err error) {
	sockDir, err := os.MkdirTemp("", "actorlb-bench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(sockDir)
	srv, client, err := serveREST(e, sockDir+"/s.sock", log)
	if err != nil {
		return r, err
	}
	defer func() {
		client.Close()
		if serr := srv.Shutdown(ctx); err == nil {
			err = serr
		}
	}()
	lat := startLatencyProbe(e)
	restLat := startRESTProbe(client)
	st0, err := e.Stats(ctx)
	if err != nil {
		lat.stop()
		restLat.stop()
		return r, err
	}
	cpu0, gc0, sched0 := cpuTime(), gcCPUTime(), schedLatencies()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	err = upsertAll(ctx, e, bulk, callers)
	r.wall = time.Since(start)
	r.cpu, r.gc, r.sched = cpuTime()-cpu0, gcCPUTime()-gc0, schedLatencies().minus(sched0)
	runtime.ReadMemStats(&m1)
	r.probe, r.rest = lat.stop().samples, restLat.stop().samples
	if err != nil {
		return r, err
	}
	st1, err := e.Stats(ctx)
	if err != nil {
		return r, err
	}
	r.mallocs, r.allocBytes = float64(m1.Mallocs-m0.Mallocs), allocated(&m0, &m1)
	r.requests, r.childMessages = st1.RequestsSent-st0.RequestsSent, st1.ChildMessages-st0.ChildMessages
	r.steps = make(map[string]actorlb.StepTiming, len(st1.Steps))
	for name, b := range st1.Steps {
		a := st0.Steps[name]
		r.steps[name] = actorlb.StepTiming{Count: b.Count - a.Count, Total: b.Total - a.Total}
	}
	return r, nil
}

// pooledSingleRounds returns, of rs, the medians of the wall time, CPU,
// collector CPU, mallocs and bytes allocated, the shortest and longest
// wall time, and the pooled rest: the
// sched waits, counters and step timings summed, the probes' samples
// together, sorted.
func pooledSingleRounds(rs []singleRound) singleRound {
	var walls, cpus, gcs []time.Duration
	var mallocs, allocs []float64
	p := singleRound{steps: map[string]actorlb.StepTiming{}}
	for _, r := range rs {
		walls, cpus, gcs = append(walls, r.wall), append(cpus, r.cpu), append(gcs, r.gc)
		mallocs, allocs = append(mallocs, r.mallocs), append(allocs, r.allocBytes)
		p.sched = p.sched.plus(r.sched)
		p.requests += r.requests
		p.childMessages += r.childMessages
		for name, t := range r.steps {
			s := p.steps[name]
			s.Count += t.Count
			s.Total += t.Total
			p.steps[name] = s
		}
		p.probe, p.rest = append(p.probe, r.probe...), append(p.rest, r.rest...)
	}
	p.wall, p.cpu, p.gc = median(walls), median(cpus), median(gcs)
	p.fastest, p.slowest = slices.Min(walls), slices.Max(walls)
	p.mallocs, p.allocBytes = median(mallocs), median(allocs)
	slices.Sort(p.probe)
	slices.Sort(p.rest)
	return p
}

// plus is h and o pooled: their counts added, bucket by bucket (o's
// buckets when h has none).
func (h schedHist) plus(o schedHist) schedHist {
	if len(h.counts) == 0 {
		return schedHist{counts: slices.Clone(o.counts), buckets: o.buckets}
	}
	d := schedHist{counts: slices.Clone(h.counts), buckets: h.buckets}
	for i := range d.counts {
		if i < len(o.counts) {
			d.counts[i] += o.counts[i]
		}
	}
	return d
}
