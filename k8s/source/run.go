package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/actorlb/actorlb/internal/hugepages"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/sirupsen/logrus"
)

// phase is where the runner is in the sync rule.
type phase uint8

const (
	// phaseWaiting: not every informer has synced; nothing is applied,
	// the restored state keeps serving.
	phaseWaiting phase = iota
	// phaseFull: every informer synced; the full reconciliation is due
	// (or being retried).
	phaseFull
	// phaseIncremental: the full reconciliation was applied; changes are
	// applied as they come.
	phaseIncremental
)

// runner is the state of Run's goroutine, which alone touches it and the
// State.
type runner struct {
	s       *Source
	st      *State
	set     *informerSet
	phase   phase
	waiting int // informers still to sync

	timer *time.Timer
	armed bool
	due   time.Time

	// preparing: services received before the sync may be left to
	// translate (State.Prepare).
	preparing bool

	backoff time.Duration
	// notBefore: after a call that failed as a whole, nothing is tried
	// before it (events wait too).
	notBefore time.Time
	nodeSeen  bool
}

// prepareChunk is how many services State.Prepare translates at a time
// before the sync (a few milliseconds of work).
const prepareChunk = 256

// ready is a closed channel: a select case on it is always ready.
var ready = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Run watches the cluster and programs the target until ctx is done; it
// then stops its informers and returns nil. Errors are for a source that
// cannot start (Run called twice, an informer refusing its handler);
// failures of the apiserver or the target are retried, never returned.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("run kubernetes source: %w", ErrAlreadyRunning)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.start = time.Now()
	s.prepareHeap()
	set, err := s.informers()
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		for _, f := range set.factories {
			f.Shutdown()
		}
	}()
	for _, f := range set.factories {
		f.Start(ctx.Done())
	}
	r := &runner{
		s:       s,
		st:      NewState(s.cfg.NodeName, s.cfg.NodeAddresses),
		set:     set,
		waiting: len(set.synced),
		timer:   time.NewTimer(time.Hour),
		backoff: s.cfg.RetryMin,
	}
	r.timer.Stop()
	defer r.timer.Stop()
	s.log.WithFields(logrus.Fields{"node": s.cfg.NodeName, "nodeAddresses": fmt.Sprint(s.cfg.NodeAddresses), "watchNode": set.node}).
		Info("kubernetes: source started; the restored services keep serving until every informer has synced")
	r.loop(ctx)
	return nil
}

// SyncHugePages is how much of the heap's growth Run advises for
// transparent huge pages before its informers list (Config.NoHugePages
// turns it off). The lists, the translations and the engine's state of
// the full sync fill fresh heap in a process that has just started, and
// each first write of a 4 KiB page is a page fault; on the development VM
// those faults made the engine's SyncSource of 10,000 services of ten
// endpoints take twice as long in the agent as the same call on warm
// heap (docs/performance-history.md, session 54). A 2 MiB page is one
// fault for 512. Advising costs one collection of the heap Run starts
// with (package internal/hugepages says when it does nothing). 64 MiB,
// the restore's, went to the lists before the sync began and saved the
// sync nothing; 256 saved no more than 128 (the same sittings).
const SyncHugePages = 128 << 20

// prepareHeap advises the heap's next SyncHugePages bytes for huge pages
// (hugepages.Prepare, which says why when it does not), unless turned
// off.
func (s *Source) prepareHeap() {
	if s.cfg.NoHugePages {
		return
	}
	r := hugepages.Prepare(SyncHugePages)
	log := s.log.WithField("took", r.Took.String())
	if r.Skipped != "" {
		log.WithField("reason", r.Skipped).Debug("kubernetes: no huge pages asked for the sync's heap")
		return
	}
	log.WithField("advised_mib", r.Advised>>20).Debug("kubernetes: huge pages asked for the sync's heap")
}

func (r *runner) loop(ctx context.Context) {
	var resync <-chan time.Time
	if r.s.cfg.ResyncInterval > 0 {
		t := time.NewTicker(r.s.cfg.ResyncInterval)
		defer t.Stop()
		resync = t.C
	}
	for {
		var synced <-chan struct{}
		if r.waiting > 0 {
			synced = r.set.synced[len(r.set.synced)-r.waiting].Done()
		}
		// While the initial lists arrive, the services received so far
		// are translated a chunk at a time (nothing is applied), so that
		// at sync only those changed since are left; each chunk is short,
		// so the sync is seen soon after it happens.
		var prepare <-chan struct{}
		if r.phase == phaseWaiting && r.preparing {
			prepare = ready
		}
		select {
		case <-ctx.Done():
			return
		case <-synced:
			r.waiting--
			if r.waiting == 0 {
				r.allSynced()
			}
		case <-prepare:
			r.preparing = r.st.Prepare(prepareChunk)
		case <-r.s.in.notify:
			// A signal whose events an earlier drain took (allSynced's,
			// a step's) brings nothing new: it must not cut a retry's
			// backoff short.
			if !r.drain() {
				break
			}
			if r.phase != phaseWaiting {
				r.arm(r.s.cfg.Debounce)
			} else {
				r.preparing = true
			}
		case <-r.timer.C:
			r.armed = false
			r.step(ctx)
		case <-resync:
			if r.phase == phaseIncremental {
				r.st.Resync()
				r.arm(r.s.cfg.Debounce)
			}
		}
	}
}

// allSynced starts the full reconciliation. The events still in the inbox
// are moved into the State, but not translated: the services changed
// since State.Prepare last ran are translated by the full step, after the
// sync is logged (the initial sync is timed from that line).
func (r *runner) allSynced() {
	r.drain()
	if r.set.node && !r.nodeSeen {
		r.s.log.WithField("node", r.s.cfg.NodeName).
			Warn("kubernetes: no Node of this name: NodePort frontends get the surrogate address only (set the node name or the node addresses)")
	}
	r.s.log.Info("kubernetes: every informer synced; applying the full state")
	r.phase = phaseFull
	r.arm(0)
}

// arm makes the timer fire in d (or at notBefore, if later), unless it
// fires sooner already.
func (r *runner) arm(d time.Duration) {
	due := time.Now().Add(d)
	if due.Before(r.notBefore) {
		due = r.notBefore
	}
	if r.armed && !r.due.After(due) {
		return
	}
	r.armed, r.due = true, due
	r.timer.Reset(time.Until(due))
}

// drain moves every pending event into the State and reports whether
// there was any.
func (r *runner) drain() bool {
	svcs, sls, node := r.s.in.take()
	for k, ev := range svcs {
		if ev.obj == nil {
			r.st.DeleteService(k, ev.trigger)
		} else {
			r.st.UpsertService(ev.obj, ev.trigger)
		}
	}
	for id, ev := range sls {
		if ev.obj == nil {
			r.st.DeleteSlice(id.namespace, id.name, ev.trigger)
		} else {
			r.st.UpsertSlice(ev.obj, ev.trigger)
		}
	}
	if node != nil {
		r.nodeSeen = r.nodeSeen || !node.deleted
		if node.deleted {
			r.s.log.WithField("node", r.s.cfg.NodeName).Warn("kubernetes: the Node was deleted; NodePort frontends keep its last addresses")
		} else {
			r.st.SetNodeAddresses(node.addrs)
			addrs := r.st.NodeAddresses()
			r.s.mu.Lock()
			changed := !slices.Equal(r.s.status.NodeAddresses, addrs)
			r.s.status.NodeAddresses = addrs
			r.s.mu.Unlock()
			if changed {
				r.s.log.WithField("nodeAddresses", fmt.Sprint(addrs)).Info("kubernetes: node addresses for NodePort frontends")
				if f := r.s.cfg.OnNodeAddresses; f != nil {
					f(slices.Clone(addrs))
				}
			}
		}
	}
	if len(svcs) > 0 || len(sls) > 0 || node != nil {
		r.publishCounts()
		return true
	}
	return false
}

func (r *runner) step(ctx context.Context) {
	if d := time.Until(r.notBefore); d > 0 {
		r.arm(d)
		return
	}
	r.drain()
	switch r.phase {
	case phaseFull:
		r.full(ctx)
	case phaseIncremental:
		r.incremental(ctx)
	}
}

func (r *runner) full(ctx context.Context) {
	desired := r.st.Desired()
	t0 := time.Now()
	res, err := r.s.cfg.Target.SyncSource(ctx, lb.SourceKubernetes, desired)
	if ctx.Err() != nil {
		return
	}
	d := time.Since(t0)
	if err != nil && len(res.Failed) == 0 {
		r.callFailed("full sync", err)
		return
	}
	rep := r.st.CommitFull(desired, res.Failed)
	r.phase = phaseIncremental
	r.s.log.WithFields(logrus.Fields{
		"services": len(desired), "upserted": res.Upserted, "deleted": res.Deleted, "failed": len(res.Failed), "took": d.String(),
	}).Info("kubernetes: full sync applied; changes are applied as they come from now on")
	r.applied(d, rep)
	if rep.Failed == 0 && !r.st.Counts().Idle() {
		r.arm(r.s.cfg.Debounce) // changes that came during the sync
	}
}

func (r *runner) incremental(ctx context.Context) {
	ch := r.st.Pending()
	if ch.Empty() {
		r.report(r.st.Commit(Round{}))
		return
	}
	t0 := time.Now()
	rd := Round{Change: ch}
	tg := r.s.cfg.Target
	if len(ch.Deletes) > 0 {
		rd.DeleteResults, rd.DeleteErr = tg.DeleteBatchAs(ctx, lb.SourceKubernetes, ch.Deletes)
		if rd.DeleteErr == nil && len(rd.DeleteResults) != len(ch.Deletes) {
			rd.DeleteErr = fmt.Errorf("delete batch: %d results for %d frontends", len(rd.DeleteResults), len(ch.Deletes))
		}
	}
	if len(ch.Upserts) > 0 {
		rd.UpsertResults, rd.UpsertErr = tg.UpsertBatch(ctx, ch.Upserts)
		if rd.UpsertErr == nil && len(rd.UpsertResults) != len(ch.Upserts) {
			rd.UpsertErr = fmt.Errorf("upsert batch: %d results for %d services", len(rd.UpsertResults), len(ch.Upserts))
		}
	}
	if ctx.Err() != nil {
		return
	}
	d := time.Since(t0)
	rep := r.st.Commit(rd)
	if err := errors.Join(rd.DeleteErr, rd.UpsertErr); err != nil {
		r.report(rep)
		r.callFailed("apply", err)
		return
	}
	r.applied(d, rep)
}

// applied records a call that went through (some items may have failed).
func (r *runner) applied(d time.Duration, rep Report) {
	r.s.m.syncSeconds.Observe(d.Seconds())
	r.report(rep)
	r.s.mu.Lock()
	r.s.status.Synced = true
	r.s.status.LastSync = time.Now()
	r.s.status.LastSyncDuration = d
	if rep.Failed == 0 {
		r.s.status.LastApplyError = ""
	} else {
		r.s.status.LastApplyError = rep.FirstError.Error()
	}
	r.s.mu.Unlock()
	if rep.Failed == 0 {
		r.backoff = r.s.cfg.RetryMin
		return
	}
	r.s.log.WithFields(logrus.Fields{"failed": rep.Failed, "retryIn": r.backoff.String()}).WithError(rep.FirstError).
		Warn("kubernetes: some changes failed; they stay pending and are retried")
	r.arm(r.nextBackoff())
}

// callFailed records a call that failed as a whole: nothing is tried
// before the backoff is over.
func (r *runner) callFailed(what string, err error) {
	d := r.nextBackoff()
	r.notBefore = time.Now().Add(d)
	r.s.mu.Lock()
	r.s.status.LastApplyError = what + ": " + err.Error()
	r.s.mu.Unlock()
	r.s.log.WithFields(logrus.Fields{"retryIn": d.String()}).WithError(err).Warn("kubernetes: " + what + " failed; retrying")
	r.arm(d)
}

func (r *runner) nextBackoff() time.Duration {
	d := r.backoff
	r.backoff = min(2*r.backoff, r.s.cfg.RetryMax)
	return d
}

// report publishes what a Commit changed.
func (r *runner) report(rep Report) {
	now := time.Now()
	for _, t := range rep.Triggers {
		r.s.m.programming.Observe(now.Sub(t).Seconds())
	}
	for _, c := range rep.NewConflicts {
		r.s.log.WithFields(logrus.Fields{"frontend": c.Frontend.String(), "service": c.Service}).
			Warn("kubernetes: frontend conflict: " + c.Reason)
	}
	if len(rep.Names) > 0 {
		r.s.mu.Lock()
		for _, n := range rep.Names {
			if n.Name == "" {
				delete(r.s.names, n.Frontend)
			} else {
				r.s.names[n.Frontend] = n.Name
			}
		}
		r.s.mu.Unlock()
	}
	r.publishCounts()
}

func (r *runner) publishCounts() {
	c := r.st.Counts()
	conflicts := r.st.Conflicts()
	r.s.m.conflicts.Set(float64(len(conflicts)))
	r.s.mu.Lock()
	r.s.status.Services, r.s.status.Frontends, r.s.status.Pending = c.Services, c.Frontends, c.Pending
	r.s.status.Conflicts = conflicts
	r.s.mu.Unlock()
}
