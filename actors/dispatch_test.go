package actors

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// waitRan waits for one signal on ran (what: what it stands for).
func waitRan(t *testing.T, ran <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not run within 5s", what)
	}
}

func TestDispatcherRunsWorkBeyondItsBusyWorkers(t *testing.T) {
	d := NewDispatcher(2)
	t.Cleanup(d.Close)
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	// Two runs that block hold both workers (or run beside them).
	for range 2 {
		d.Schedule(func() { started <- struct{}{}; <-release })
	}
	waitRan(t, started, "a blocking run")
	waitRan(t, started, "the second blocking run")
	// A third run must neither block Schedule nor wait for them.
	done := make(chan struct{})
	go func() { d.Schedule(func() { started <- struct{}{} }); close(done) }()
	waitRan(t, done, "Schedule with every worker busy")
	waitRan(t, started, "a run scheduled while every worker is busy")
	close(release)
}

func TestDispatcherRunsEverythingScheduled(t *testing.T) {
	d := NewDispatcher(3)
	t.Cleanup(d.Close)
	const n = 1000
	ran := make(chan struct{}, n)
	for range n {
		d.Schedule(func() { ran <- struct{}{} })
	}
	for i := range n {
		waitRan(t, ran, fmt.Sprintf("run %d of %d", i+1, n))
	}
}

func TestDispatcherRunsWorkAfterClose(t *testing.T) {
	d := NewDispatcher(1)
	d.Close()
	d.Close() // twice is fine
	ran := make(chan struct{}, 1)
	d.Schedule(func() { ran <- struct{}{} })
	waitRan(t, ran, "a run scheduled after Close")
	if got := d.Throughput(); got != Throughput {
		t.Fatalf("Throughput() = %d, want %d", got, Throughput)
	}
}

func TestDispatcherWorkersEndAfterClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	d := NewDispatcher(3)
	ran := make(chan struct{}, 1)
	d.Schedule(func() { ran <- struct{}{} })
	waitRan(t, ran, "a run before Close")
	d.Close()
}

// BenchmarkDispatcherHandOff measures one run handed to an idle worker
// and its signal back: the hop every mailbox that wakes up takes.
func BenchmarkDispatcherHandOff(b *testing.B) {
	d := NewDispatcher(2)
	b.Cleanup(d.Close)
	done := make(chan struct{})
	run := func() { done <- struct{}{} }
	b.ReportAllocs()
	for b.Loop() {
		d.Schedule(run)
		<-done
	}
}
