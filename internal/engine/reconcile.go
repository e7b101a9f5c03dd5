package engine

import (
	"errors"
	"fmt"
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// reconcilePlan asks every map owner to compare its maps with what it
// wrote (and their pins with the maps) and to repair the difference. It
// waits in no queue: an owner handles the request between two of its
// batches, when its map must equal its mirror, whatever ops are in flight.
type reconcilePlan struct {
	call  messages.Call
	found []messages.Drift
}

// reconcileChildren are the map owners, each asked once (the Maglev
// owner with the tables' inputs: see ask).
var reconcileChildren = []string{ChildService4, ChildService6, ChildBackend4, ChildBackend6, ChildRevNAT, ChildMembers, ChildAffinity, ChildMaglev, ChildSourceRange}

func (c *Core) reconcile(m *messages.Reconcile) {
	c.begin(&op{plan: &reconcilePlan{call: m}})
}

func (p *reconcilePlan) start(*Core, *op) []step { return reconcileSteps }

// reconcileSteps are the steps of a reconcile op (see on).
var reconcileSteps = []step{{name: StepReconcile, send: on((*reconcilePlan).ask)}}

func (p *reconcilePlan) ask(c *Core, o *op) {
	for _, child := range reconcileChildren {
		if child == ChildMaglev {
			// The owner keeps digests, not tables: it rebuilds a
			// drifted table from the table's inputs (those it wrote it
			// from, which it checks these are).
			var ts []messages.MaglevTable
			for _, s := range c.services.all {
				if s.algo != lb.LBAlgMaglev {
					continue
				}
				if t, ok := maglevTable(c.services.expand(s)); ok {
					ts = append(ts, t)
				}
			}
			c.request(o, child, 0, reconciled, &messages.MaglevReconcile{ReqID: c.reqID(), Tables: ts})
			continue
		}
		c.request(o, child, 0, reconciled, &messages.MapReconcile{ReqID: c.reqID()})
	}
}

// reconciled folds one owner's answer.
func reconciled(o *op, _ int, reply any) error {
	p := o.plan.(*reconcilePlan)
	p.found = append(p.found, reply.(*messages.MapReconciled).Maps...)
	return nil
}

func (p *reconcilePlan) rollback(*Core, *op) []step { return nil }

// finish logs what was repaired and answers the caller, the maps in the
// order of maps.Names (the caller counts: the façade keeps the totals
// across restarts of the core). A map whose check or repair failed
// fails the call (naming each such map); the others' repairs stand.
func (p *reconcilePlan) finish(c *Core, _ *op, err error) {
	slices.SortFunc(p.found, func(a, b messages.Drift) int {
		return slices.Index(maps.Names, a.Map) - slices.Index(maps.Names, b.Map)
	})
	var errs []error
	for _, d := range p.found {
		c.logDrift(d)
		if d.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Map, d.Err))
		}
	}
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		err = fmt.Errorf("reconcile maps: %w", err)
	}
	c.answer(p.call, messages.ReconcileReply{Maps: p.found, Err: err})
}

func (c *Core) logDrift(d messages.Drift) {
	if d.Repairs() == 0 {
		return
	}
	c.log.WithFields(map[string]any{
		"map": d.Map, "pin": d.Pin.String(), "missing": d.Missing, "changed": d.Changed, "extra": d.Extra,
	}).Warn("map drifted from what actorlb wrote: repaired")
}
