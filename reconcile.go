package actorlb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// MapDrift is what one reconcile found in one map, and repaired.
type MapDrift struct {
	Map string
	// Pin is what the map's pin named before the repair: "ok",
	// "missing" or "replaced" (then re-pinned), "unpinned" (in memory).
	Pin string
	// Missing entries were written by the engine and gone from the map,
	// Changed ones held another value, Extra ones were in the map without
	// the engine having written them (deleted).
	Missing, Changed, Extra int
	// Error is why the check or the repair failed ("" if it did not).
	Error string
}

// Repairs is the number of entries and pins repaired.
func (d MapDrift) Repairs() int {
	n := d.Missing + d.Changed + d.Extra
	if d.Pin == maps.PinMissing.String() || d.Pin == maps.PinReplaced.String() {
		n++
	}
	return n
}

// Reconcile compares every map with what the engine wrote and every pin
// with its map, and repairs what differs: re-pins a pin removed or
// replaced, writes entries that are missing or changed, then deletes
// entries nobody wrote (make-before-break). It returns one MapDrift per
// map in the order of maps.Names; the error names each map that could not
// be checked or repaired. It runs every Config.ReconcileInterval too.
func (e *Engine) Reconcile(ctx context.Context) ([]MapDrift, error) {
	r, _, err := call(ctx, e, func(ch chan<- messages.ReconcileReply) any { return &messages.Reconcile{Reply: ch} })
	if err == nil {
		err = r.Err
	}
	out := make([]MapDrift, len(r.Maps))
	for i, d := range r.Maps {
		out[i] = MapDrift{Map: d.Map, Pin: d.Pin.String(), Missing: d.Missing, Changed: d.Changed, Extra: d.Extra}
		if d.Err != nil {
			out[i].Error = d.Err.Error()
		}
	}
	e.driftMu.Lock()
	defer e.driftMu.Unlock()
	if e.drift == nil {
		e.drift = map[string]map[string]uint64{}
	}
	for _, d := range r.Maps {
		for kind, n := range map[string]int{"missing": d.Missing, "changed": d.Changed, "extra": d.Extra} {
			if n > 0 {
				e.count(d.Map, kind, uint64(n))
			}
		}
		if d.Pin == maps.PinMissing || d.Pin == maps.PinReplaced {
			e.count(d.Map, "pin", 1)
		}
	}
	e.reconciles++
	e.lastAt, e.lastErr = time.Now(), err
	if err != nil {
		return out, fmt.Errorf("reconcile: %w", err)
	}
	return out, nil
}

// count adds n repairs of kind to map m (driftMu held).
func (e *Engine) count(m, kind string, n uint64) {
	k := e.drift[m]
	if k == nil {
		k = map[string]uint64{}
		e.drift[m] = k
	}
	k[kind] += n
}

// reconcileEvery reconciles the maps every interval until Close.
func (e *Engine) reconcileEvery(every time.Duration) {
	defer e.loops.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.closed:
			return
		case <-t.C:
		}
		if _, err := e.Reconcile(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
			e.log.WithError(err).Warn("periodic reconcile failed")
		}
	}
}
