package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/k8s/source"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// syncedHook notes when the source logs that every informer has synced
// (its "applying the full state" line), and the process's CPU time,
// collections and page faults then.
type syncedHook struct {
	mu     sync.Mutex
	at     time.Time
	cpu    time.Duration
	gc     gcSample
	faults int64 // the process's minor page faults so far
}

// gcSample is the garbage collector's work so far.
type gcSample struct {
	cycles uint64
	cpu    float64 // seconds
}

func readGC() gcSample {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	var g gcSample
	if s[0].Value.Kind() == metrics.KindUint64 {
		g.cycles = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64 {
		g.cpu = s[1].Value.Float64()
	}
	return g
}

func (h *syncedHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *syncedHook) Fire(e *logrus.Entry) error {
	if strings.Contains(e.Message, "every informer synced") {
		cpu, gc, faults := cpuTime(), readGC(), minorFaults()
		h.mu.Lock()
		if h.at.IsZero() {
			h.at, h.cpu, h.gc, h.faults = e.Time, cpu, gc, faults
		}
		h.mu.Unlock()
	}
	return nil
}

// runSyncAgent is the agent of the initial-sync scenario, run as a
// process of its own by kubeSync: a fresh engine and the Kubernetes source
// on the cluster of kubeconfig, where n services are waiting. It prints a
// syncReport as one JSON line on stdout.
func runSyncAgent(kubeconfig, root string, n int, heapProfile string) error {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("sync agent: kubeconfig: %w", err)
	}
	source.UseProtobuf(cfg) // as the agent (cmd/actorlb)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("sync agent: client: %w", err)
	}
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	srcLog := logrus.New()
	srcLog.SetOutput(io.Discard)
	srcLog.SetLevel(logrus.InfoLevel)
	hook := &syncedHook{}
	srcLog.AddHook(hook)

	sizes := kubeSizes(n)
	e, err := actorlb.New(ctx, actorlb.Config{BPFRoot: root, MaxEntries: sizes, Logger: log, ReconcileInterval: noReconcile})
	if err != nil {
		return err
	}
	tt := &timedTarget{e: e}
	src, err := newKubeSource(kubeSourceConfig{Client: client, Target: tt, Logger: srcLog, Registerer: prometheus.NewRegistry()})
	if err != nil {
		e.Close()
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	runAt := time.Now()
	go func() { done <- src.Run(sctx) }()
	stopped := false
	stopSource := func() {
		if !stopped {
			stopped = true
			stop()
			<-done
		}
	}
	defer stopSource()
	defer e.Close()
	if err := waitApplied(ctx, src, n, 4*time.Minute); err != nil {
		return err
	}
	gcEnd, faultsEnd := readGC(), minorFaults()
	calls, desired := tt.snapshot()
	st, err := e.Stats(ctx)
	if err != nil {
		return err
	}
	if len(calls) == 0 || calls[0].what != "sync" {
		return fmt.Errorf("sync agent: the source's first engine call was not a full sync (%d calls)", len(calls))
	}
	hook.mu.Lock()
	syncedAt, syncedCPU, syncedGC, syncedFaults := hook.at, hook.cpu, hook.gc, hook.faults
	hook.mu.Unlock()
	if syncedAt.IsZero() {
		return fmt.Errorf("sync agent: the source never logged that its informers synced")
	}
	var r syncReport
	r.Services, r.Frontends = n, len(desired)
	last := calls[len(calls)-1]
	r.ListS = syncedAt.Sub(runAt).Seconds()
	r.ToCallMS = ms(calls[0].start.Sub(syncedAt))
	r.SyncCallMS = ms(calls[0].end.Sub(calls[0].start))
	r.SyncMS = ms(last.end.Sub(syncedAt))
	r.SyncCPUMS = ms(last.cpuEnd - syncedCPU)
	r.MapWrites = st.MapWrites()
	r.SyncGCs, r.SyncGCCPUMS = gcEnd.cycles-syncedGC.cycles, (gcEnd.cpu-syncedGC.cpu)*1000
	r.SyncPageFaults = faultsEnd - syncedFaults

	// Memory with the informer caches, the source's state and the engine.
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	r.HeapMB = float64(m.HeapAlloc) / (1 << 20)
	r.RSSMB, r.RSSPeakMB = procStatusMB("VmRSS"), procStatusMB("VmHWM")
	if heapProfile != "" {
		if err := writeHeapProfile(heapProfile); err != nil {
			return err
		}
	}

	// The floors: the same translated set (the engine copies what it is
	// given) through one UpsertBatch on fresh maps, and through the
	// engine's SyncSource alone, in this process while the source idles
	// with its caches (the same live heap as during the sync); then one
	// UpsertBatch again once the source has stopped. Freed memory goes
	// back to the OS only after the first two (else their heap would
	// fault in again and the floor be slower for it).
	fresh := func(dir string, do func(e *actorlb.Engine) error) (wall, cpu time.Duration, err error) {
		e, err := actorlb.New(ctx, actorlb.Config{BPFRoot: dir, MaxEntries: sizes, Logger: log, ReconcileInterval: noReconcile})
		if err != nil {
			return 0, 0, err
		}
		runtime.GC()
		cpu0, t0 := cpuTime(), time.Now()
		err = do(e)
		wall, cpu = time.Since(t0), cpuTime()-cpu0
		if cerr := e.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, 0, err
		}
		return wall, cpu, maps.Remove(dir)
	}
	upsertBatch := func(e *actorlb.Engine) error {
		rs, err := e.UpsertBatch(ctx, desired)
		return firstErr(rs, err, func(r actorlb.UpsertResult) error { return r.Err })
	}
	batch, batchCPU, err := fresh(root+"-batch", upsertBatch)
	if err != nil {
		return err
	}
	direct, directCPU, err := fresh(root+"-direct", func(e *actorlb.Engine) error {
		res, err := e.SyncSource(ctx, lb.SourceKubernetes, desired)
		if err == nil && res.Upserted != len(desired) {
			err = fmt.Errorf("direct sync: %d of %d services upserted", res.Upserted, len(desired))
		}
		return err
	})
	if err != nil {
		return err
	}
	debug.FreeOSMemory()
	r.RSSFreedMB = procStatusMB("VmRSS")
	stopSource()
	if err := e.Close(); err != nil {
		return err
	}
	if err := maps.Remove(root); err != nil {
		return err
	}
	bare, bareCPU, err := fresh(root+"-bare", upsertBatch)
	if err != nil {
		return err
	}
	r.BatchMS, r.BatchCPUMS = ms(batch), ms(batchCPU)
	r.DirectSyncMS, r.DirectSyncCPUMS = ms(direct), ms(directCPU)
	r.BareBatchMS, r.BareBatchCPUMS = ms(bare), ms(bareCPU)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// procStatusMB reads a field of /proc/self/status given in kB, in MiB.
func procStatusMB(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
