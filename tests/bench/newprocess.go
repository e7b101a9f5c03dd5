package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
)

// A restart of the agent is a new process: its heap is fresh pages the
// kernel faults in as they are first written, where the warm restarts of
// restore-10k-x10 reuse the pages an engine of the same process freed.
// newProcessRestores measures both sides of the restore ratio that way:
// the raw batched dump and the engine's restore, each in a process of its
// own (this program run again with --restore-child), rounds times
// alternately, the medians reported.
//
// The "engine" child restores as the agent does: where the kernel's
// transparent huge page policy is "madvise", New asks for huge pages for
// the heap the restore fills (internal/hugepages). The "engine-4k" child
// restores with that turned off (Config.NoRestoreHugePages), 4 KiB pages
// only: the two side by side, in one run, are what the huge pages save.
//
// The "engine-prefaulted" child is a diagnostic: before New it writes one
// byte in every page of a prefaultBytes buffer and frees it, so that the
// restore's heap reuses pages the kernel has already faulted in. The
// difference from the "engine-4k" child is what the first writes of
// fresh 4 KiB pages cost the restore on this machine (some 15-18 µs a
// page on the development VM, a paravirtualised guest), not engine work;
// the child also reports what one first write cost it.

// prefaultBytes is what the engine-prefaulted child faults in and frees
// before New: more than the 10k×10 restore allocates (some 40 MB).
const prefaultBytes = 96 << 20

// childReport is what a --restore-child process prints as its last line.
type childReport struct {
	ReadyNS  int64            `json:"ready_ns"`
	CPUNS    int64            `json:"cpu_ns"`       // the process's CPU time while measured
	Faults   int64            `json:"minor_faults"` // page faults while measured
	StepsNS  map[string]int64 `json:"steps_ns,omitempty"`
	Services int              `json:"services,omitempty"`
	// FaultNS is the mean time of one first write of a fresh page
	// (engine-prefaulted only).
	FaultNS int64 `json:"fault_ns,omitempty"`
}

// prefault writes one byte in every page of a fresh buffer of n bytes,
// frees it, and returns the mean time a page took; the runtime keeps the
// pages for the heap's next allocations.
func prefault(n int) time.Duration {
	f0, start := minorFaults(), time.Now()
	b := make([]byte, n)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	d := time.Since(start)
	faults := max(minorFaults()-f0, 1)
	runtime.KeepAlive(b)
	b = nil
	runtime.GC() // frees the buffer; its pages stay with the heap
	return d / time.Duration(faults)
}

// runRestoreChild is the child: what is "dump" (the raw batched dump) or
// "engine" (New restoring from the pins under root).
func runRestoreChild(what, root string) error {
	var r childReport
	switch what {
	case "dump":
		f0 := minorFaults()
		d, cpu, err := batchDumpTime(root, benchSizes)
		r.Faults = minorFaults() - f0
		if err != nil {
			return err
		}
		r.ReadyNS, r.CPUNS = d.Nanoseconds(), cpu.Nanoseconds()
	case "engine", "engine-4k", "engine-prefaulted":
		if what == "engine-prefaulted" {
			r.FaultNS = prefault(prefaultBytes).Nanoseconds()
		}
		log := logrus.New()
		log.SetLevel(logrus.WarnLevel)
		ctx := context.Background()
		cfg := engineConfig(root, benchSizes, log)
		cfg.NoRestoreHugePages = what == "engine-4k"
		f0, cpu0 := minorFaults(), cpuTime()
		start := time.Now()
		e, err := actorlb.New(ctx, cfg)
		if err != nil {
			return err
		}
		r.ReadyNS, r.CPUNS = time.Since(start).Nanoseconds(), (cpuTime() - cpu0).Nanoseconds()
		r.Faults = minorFaults() - f0
		st, err := e.Stats(ctx)
		if err != nil {
			e.Close()
			return err
		}
		r.StepsNS = map[string]int64{}
		for name, t := range st.Steps {
			r.StepsNS[name] = t.Total.Nanoseconds()
		}
		r.Services = st.Restore.Services
		if err := e.Close(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("restore child: %q is not dump, engine, engine-4k or engine-prefaulted", what)
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// restoreChild runs this program as a --restore-child process and returns
// its report.
func restoreChild(what, root string) (childReport, error) {
	var r childReport
	if err := runSelf(context.Background(), []string{"--restore-child", what, "--restore-child-root", root}, &r); err != nil {
		return childReport{}, fmt.Errorf("restore child %s: %w", what, err)
	}
	return r, nil
}

// runSelf runs this program again with args, its standard error on the
// bench's, and decodes the last line it printed, a JSON report, into
// report. The child is killed if the bench dies first.
func runSelf(ctx context.Context, args []string, report any) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no child outlives the bench
	if err := cmd.Run(); err != nil {
		return err
	}
	if err := json.Unmarshal(lastLine(stdout.Bytes()), report); err != nil {
		return fmt.Errorf("report %q: %w", stdout.String(), err)
	}
	return nil
}

// newProcessRestores adds the restore-10k-x10 rows of restores in new
// processes, on the maps pinned under root (services restored, want).
func newProcessRestores(res *results, root string, want, rounds int) error {
	var dumps, dumpCPU []time.Duration
	var dumpFaults []float64
	// The engine children, each with its rows' suffix.
	prefaulted := &engineRounds{what: "engine-prefaulted", suffix: "_new_process_prefaulted"} // the diagnostic
	kids := []*engineRounds{
		{what: "engine", suffix: "_new_process"},
		{what: "engine-4k", suffix: "_new_process_4k_pages"}, // Config.NoRestoreHugePages
		prefaulted,
	}
	for range rounds {
		d, err := restoreChild("dump", root)
		if err != nil {
			return err
		}
		dumps, dumpFaults = append(dumps, time.Duration(d.ReadyNS)), append(dumpFaults, float64(d.Faults))
		dumpCPU = append(dumpCPU, time.Duration(d.CPUNS))
		for _, k := range kids {
			if err := k.run(root, want); err != nil {
				return err
			}
		}
	}
	dump := median(dumps)
	res.add("restore-10k-x10", "batch_dump_ms_new_process", float64(dump.Microseconds())/1000, "ms")
	res.add("restore-10k-x10", "batch_dump_page_faults_new_process", median(dumpFaults), "faults")
	res.add("restore-10k-x10", "batch_dump_cpu_ms_new_process", float64(median(dumpCPU).Microseconds())/1000, "ms")
	for _, k := range kids {
		ready := median(k.readies)
		res.add("restore-10k-x10", "ready_ms"+k.suffix, float64(ready.Microseconds())/1000, "ms")
		res.add("restore-10k-x10", "ratio_to_batch_dump"+k.suffix, ready.Seconds()/dump.Seconds(), "x")
		res.add("restore-10k-x10", "page_faults"+k.suffix, median(k.faults), "faults")
		addRestoreCPU(res, k.cpus, k.readies, k.suffix)
		addRestoreSteps(res, k.steps, k.suffix)
	}
	res.add("restore-10k-x10", "first_write_us_per_fresh_page", float64(median(prefaulted.faultCosts).Nanoseconds())/1000, "us")
	return nil
}

// engineRounds gathers the reports of one kind of engine child over the
// rounds.
type engineRounds struct {
	what, suffix        string
	readies, faultCosts []time.Duration
	cpus                []time.Duration // the process's CPU time over each restore
	faults              []float64
	steps               map[string][]time.Duration
}

// run runs one child and adds its report; it fails unless the child
// restored want services.
func (k *engineRounds) run(root string, want int) error {
	r, err := restoreChild(k.what, root)
	if err != nil {
		return err
	}
	if r.Services != want {
		return fmt.Errorf("restore child %s: restored %d services, want %d", k.what, r.Services, want)
	}
	k.readies, k.faults = append(k.readies, time.Duration(r.ReadyNS)), append(k.faults, float64(r.Faults))
	k.cpus = append(k.cpus, time.Duration(r.CPUNS))
	k.faultCosts = append(k.faultCosts, time.Duration(r.FaultNS))
	if k.steps == nil {
		k.steps = map[string][]time.Duration{}
	}
	for name, ns := range r.StepsNS {
		k.steps[name] = append(k.steps[name], time.Duration(ns))
	}
	return nil
}

// benchSizes are the map sizes of the engine scenarios.
var benchSizes = maps.Sizes{Services: 1 << 18, Backends: 1 << 18, RevNAT: 1 << 17}

// minorFaults is the process's minor page faults so far.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// addRestoreCPU adds the restore's CPU time (median of cpus, the
// process's over each restore) and its cores busy: its CPU time over its
// wall time (readies), the median of the rounds'. The raw dump it is
// compared with runs on one goroutine; a restore's cores busy below 2 on
// two cores is time a processor had nothing of the restore's to run.
func addRestoreCPU(res *results, cpus, readies []time.Duration, suffix string) {
	busy := make([]float64, len(cpus))
	for i := range cpus {
		busy[i] = cpus[i].Seconds() / readies[i].Seconds()
	}
	res.add("restore-10k-x10", "cpu_ms"+suffix, float64(median(cpus).Microseconds())/1000, "ms")
	res.add("restore-10k-x10", "cores_busy"+suffix, median(busy), "cores")
}
