package engine

import (
	"fmt"
	"sort"
	"sync"

	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/sirupsen/logrus"
)

// Restore runs as two ops. The first dumps the map owners' mirrors (which
// they loaded from the pinned maps when they started) and rebuilds the
// table from them (table.Rebuild, or flushAll when restore is off). The
// second applies the repairs the rebuild found, in the safe order, then
// installs the table and sends the allocator its snapshot: every request
// to the allocator queues behind it, so the core serves from then on.

// restorePlan is the first op: dump and rebuild. The dumps stream into
// the rebuild: the backend and revNAT entries load (table.Loader.Backends)
// as soon as their three dumps are in, the service entries (Services) as
// soon as theirs are, each while the other maps may still be read; the
// rebuild step then loads what is left and applies the rules. The service
// and backend entries stay as their owners read them (maps.Entries, raw,
// decoded as the loader reads them) and out of dump, which holds the rest.
type restorePlan struct {
	dump     table.Dump
	services [2]maps.Entries[maps.ServiceEntry] // by family: IPv4, IPv6
	backends [2]maps.Entries[maps.BackendEntry]
	restored *table.Restored
	loader   *table.Loader // nil when restore is off
	got      [len(dumpChildren)]bool
}

func (c *Core) startRestore() {
	c.begin(&op{plan: &restorePlan{}})
}

func (p *restorePlan) start(*Core, *op) []step {
	return restoreSteps
}

// restoreSteps are the steps of a restore op (see on).
var restoreSteps = []step{
	{name: StepDumpMaps, send: on((*restorePlan).dumpMaps)},
	{name: StepRebuild, send: on((*restorePlan).rebuild)},
}

// dumpMaps asks each map owner for its entries; item is the child's index
// in dumpChildren.
func (p *restorePlan) dumpMaps(c *Core, o *op) {
	if c.cfg.Restore && p.loader == nil {
		p.loader = table.NewLoader()
	}
	for i, child := range dumpChildren {
		c.request(o, child, i, p.dumped, &messages.MapDump{ReqID: c.reqID()})
	}
}

var dumpChildren = [...]string{ChildService4, ChildService6, ChildBackend4, ChildBackend6, ChildRevNAT, ChildMembers, ChildAffinity, ChildSourceRange}

// Indexes in dumpChildren.
const (
	dumpService4 = iota
	dumpService6
	dumpBackend4
	dumpBackend6
	dumpRevNAT
)

func (p *restorePlan) dumped(_ *op, i int, r any) error {
	switch dumpChildren[i] {
	case ChildService4:
		p.services[0] = r.(*messages.MapDumped[maps.ServiceEntry]).Entries
	case ChildService6:
		p.services[1] = r.(*messages.MapDumped[maps.ServiceEntry]).Entries
	case ChildBackend4:
		p.backends[0] = r.(*messages.MapDumped[maps.BackendEntry]).Entries
	case ChildBackend6:
		p.backends[1] = r.(*messages.MapDumped[maps.BackendEntry]).Entries
	case ChildRevNAT:
		rev := r.(*messages.RevNATDumped)
		p.dump.RevNAT4, p.dump.RevNAT6 = rev.V4, rev.V6
	case ChildMembers:
		p.dump.Members = r.(*messages.MapDumped[maps.MemberEntry]).Entries.Slice()
	case ChildAffinity:
		p.dump.AffinityMatch = r.(*messages.MapDumped[maps.AffinityMatchKey]).Entries.Slice()
	case ChildSourceRange:
		p.dump.SourceRanges = r.(*messages.MapDumped[maps.SourceRangeKey]).Entries.Slice()
	}
	p.got[i] = true
	if p.loader != nil {
		if p.got[dumpBackend4] && p.got[dumpBackend6] && p.got[dumpRevNAT] {
			p.loader.Backends(p.backends, [2][]maps.RevNATEntry{p.dump.RevNAT4, p.dump.RevNAT6})
		}
		if p.got[dumpService4] && p.got[dumpService6] {
			p.loader.Services(p.services)
		}
	}
	return nil
}

func (p *restorePlan) rebuild(c *Core, _ *op) {
	if c.cfg.Restore {
		// Every dump is in: the loader has both parts (Rebuild reads
		// neither list of p.dump, which are empty).
		p.restored = p.loader.Rebuild(p.dump)
	} else {
		d := p.dump
		d.Services4, d.Services6 = p.services[0].Slice(), p.services[1].Slice()
		d.Backends4, d.Backends6 = p.backends[0].Slice(), p.backends[1].Slice()
		p.restored = flushAll(d)
	}
	p.dump, p.services, p.backends = table.Dump{}, [2]maps.Entries[maps.ServiceEntry]{}, [2]maps.Entries[maps.BackendEntry]{}
}

func (p *restorePlan) rollback(*Core, *op) []step { return nil }

func (p *restorePlan) finish(c *Core, _ *op, err error) {
	if err != nil {
		c.restoreFailed(err)
		return
	}
	c.begin(&op{plan: &repairPlan{restored: p.restored}})
}

// repairPlan is the second op: repairs, install, allocator snapshot.
type repairPlan struct {
	restored *table.Restored
	// maglevRepairs and maglevWrites: what the Maglev owner's sync found
	// and wrote.
	maglevRepairs, maglevWrites int
}

// StepRepairMaglev is the restore step that makes the Maglev tables those
// of the restored services.
const StepRepairMaglev = "repair: maglev tables"

// fix is one repair step: the entries of one kind of one family.
type fix struct {
	name string
	f    maps.Family
	svc  func(fx *table.Fixes) ([]maps.ServiceEntry, []maps.ServiceKey)
	be   func(fx *table.Fixes) []uint32
	rev  func(fx *table.Fixes) ([]maps.RevNATEntry, []uint16)
}

// fixOrder is the safe order of the repairs of one family.
var fixOrder = []fix{
	{name: "repair: write revNAT", rev: func(fx *table.Fixes) ([]maps.RevNATEntry, []uint16) { return fx.RevNATWrites, nil }},
	{name: "repair: delete masters", svc: func(fx *table.Fixes) ([]maps.ServiceEntry, []maps.ServiceKey) { return nil, fx.MasterDeletes }},
	{name: "repair: write slots", svc: func(fx *table.Fixes) ([]maps.ServiceEntry, []maps.ServiceKey) { return fx.SlotWrites, nil }},
	{name: "repair: write masters", svc: func(fx *table.Fixes) ([]maps.ServiceEntry, []maps.ServiceKey) { return fx.MasterWrites, nil }},
	{name: "repair: delete slots", svc: func(fx *table.Fixes) ([]maps.ServiceEntry, []maps.ServiceKey) { return nil, fx.SlotDeletes }},
	{name: "repair: delete backends", be: func(fx *table.Fixes) []uint32 { return fx.BackendDeletes }},
	{name: "repair: delete revNAT", rev: func(fx *table.Fixes) ([]maps.RevNATEntry, []uint16) { return nil, fx.RevNATDeletes }},
}

func (p *repairPlan) start(*Core, *op) []step {
	var steps []step
	mf := &p.restored.Members
	if len(mf.MemberWrites) > 0 || len(mf.MatchWrites) > 0 {
		steps = append(steps, step{name: "repair: write members", retry: mapRetries, send: func(c *Core, o *op) {
			c.applyMembers(o, mf.MemberWrites, nil, mf.MatchWrites, nil)
		}})
	}
	rf := &p.restored.SourceRanges
	if len(rf.Writes) > 0 { // before the masters that carry the flag
		steps = append(steps, step{name: "repair: write source ranges", retry: mapRetries, send: func(c *Core, o *op) {
			c.applyRanges(o, rf.Writes, nil)
		}})
	}
	for _, f := range families {
		if p.restored.Fixes(f).Empty() {
			continue
		}
		for _, fx := range fixOrder {
			fx.f = f
			if !fx.empty(p.restored) {
				steps = append(steps, step{name: fx.name, send: fx.send(p.restored), retry: mapRetries})
			}
		}
	}
	if len(mf.MemberDeletes) > 0 || len(mf.MatchDeletes) > 0 {
		steps = append(steps, step{name: "repair: delete members", retry: mapRetries, send: func(c *Core, o *op) {
			c.applyMembers(o, nil, mf.MemberDeletes, nil, mf.MatchDeletes)
		}})
	}
	if len(rf.Deletes) > 0 { // after the masters that no longer carry the flag
		steps = append(steps, step{name: "repair: delete source ranges", retry: mapRetries, send: func(c *Core, o *op) {
			c.applyRanges(o, nil, rf.Deletes)
		}})
	}
	// Always: only the Maglev owner can tell whether its maps hold the
	// restored services' tables (it builds and compares them; nothing
	// is written when they do).
	steps = append(steps, step{name: StepRepairMaglev, send: p.syncMaglev, retry: mapRetries})
	return append(steps, step{name: StepInstall, send: p.install})
}

// syncMaglev sends the Maglev owner the tables of every restored maglev
// service: it writes those missing or different and deletes the others.
func (p *repairPlan) syncMaglev(c *Core, o *op) {
	var ts []messages.MaglevTable
	for _, svc := range p.restored.Services {
		if t, ok := maglevTable(svc); ok {
			ts = append(ts, t)
		}
	}
	c.request(o, ChildMaglev, 0, maglevSynced, &messages.MaglevApply{ReqID: c.reqID(), Writes: ts, Sync: true})
}

// maglevSynced folds the sync's answer into the restore figures.
func maglevSynced(o *op, _ int, reply any) error {
	p := o.plan.(*repairPlan)
	r, ok := reply.(*messages.MaglevApplied)
	if !ok {
		return replyErr(o, 0, reply)
	}
	p.maglevRepairs, p.maglevWrites = r.Repairs, r.Written+r.Deleted
	return r.Err
}

func (fx fix) empty(r *table.Restored) bool {
	x := r.Fixes(fx.f)
	switch {
	case fx.svc != nil:
		w, d := fx.svc(x)
		return len(w) == 0 && len(d) == 0
	case fx.be != nil:
		return len(fx.be(x)) == 0
	default:
		w, d := fx.rev(x)
		return len(w) == 0 && len(d) == 0
	}
}

// send returns the step's send: the fix's entries of r.
func (fx fix) send(r *table.Restored) func(c *Core, o *op) {
	return func(c *Core, o *op) {
		x, fi := r.Fixes(fx.f), famIndex(fx.f)
		switch {
		case fx.svc != nil:
			var ws [2][]maps.ServiceEntry
			var ds [2][]maps.ServiceKey
			ws[fi], ds[fi] = fx.svc(x)
			c.applyServices(o, ws, ds)
		case fx.be != nil:
			var ds [2][]uint32
			ds[fi] = fx.be(x)
			c.applyBackends(o, [2][]maps.BackendEntry{}, ds)
		default:
			w, d := fx.rev(x)
			var ds [2][]uint16
			ds[fi] = d
			c.applyRevNAT(o, w, ds)
		}
	}
}

// install makes the restored services the table. The allocator's snapshot
// is built and sent when the op finishes, right after the gate opens
// (finish): the core serves without waiting for the allocator's answer
// (every request to it queues behind the snapshot; reads are answered
// from the table at once).
func (p *repairPlan) install(c *Core, _ *op) {
	r := p.restored
	if c.services.len() != 0 { // a core restores into an empty table: not the engine's path
		for _, svc := range r.Services {
			if old := c.services.get(svc.ID()); old != nil {
				c.drop(old, nil) // replaced whole: put keeps no backend of it
			}
			c.put(svc, nil, nil, nil, nil, nil)
		}
		return
	}
	// The backend index fills, and the services are stored beside it on
	// another goroutine (they touch nothing of the index's: r.Services is
	// only read).
	c.users = newBackendIndex()        // fill sizes it
	c.services.packer = c.users.packer // the table is empty: nothing was packed by the old one
	// The packer learns every IPv6 prefix first, in the order put would
	// (so it packs the same keys, and refuses the same ones once full):
	// then both goroutines only read it.
	c.users.learn(r.Services)
	var wg sync.WaitGroup
	wg.Go(func() {
		c.byFE = newFrontendIndex(len(r.Services))
		for _, svc := range r.Services {
			c.services.put(svc)
			c.byFE.Set(svc.Frontend(), svc.ID())
		}
	})
	c.shared = c.users.fill(r.Services)
	wg.Wait()
}

func (p *repairPlan) rollback(*Core, *op) []step { return nil }

func (p *repairPlan) finish(c *Core, _ *op, err error) {
	if err != nil {
		c.restoreFailed(err)
		return
	}
	c.ready = true
	c.recordRestore(p.restored)
	if p.maglevRepairs > 0 {
		c.restore.Repairs += p.maglevRepairs
		c.restore.RepairsByKind["maglev-table"] += p.maglevRepairs
		c.restore.Writes += p.maglevWrites
		c.log.WithFields(logrus.Fields{"repairs": p.maglevRepairs, "writes": p.maglevWrites}).Warn("restore repaired the maglev tables: missing or different from their services' backends, or of no maglev service")
	}
	c.cfg.OnUp()
	// The snapshot is built after the gate opens, within this step: no
	// call reaches the core before it is queued first for the allocator,
	// and the caller waiting on the gate need not wait for it (100k
	// bindings for 10k services of 10 backends).
	c.snapshotAllocator((*Core).failServing)
	c.refillLease() // behind the snapshot
	c.replayDeferred()
}

// restoreFailed fails the incarnation: it serves nothing and answers every
// call with the error.
func (c *Core) restoreFailed(err error) {
	c.readyErr = fmt.Errorf("restore: %w", err)
	c.log.WithError(err).Error("restore from the pinned maps failed")
	c.cfg.OnRestoreFailed(c.readyErr)
	c.replayDeferred()
}

// replayDeferred handles the calls that came before restore finished.
func (c *Core) replayDeferred() {
	deferred := c.deferred
	c.deferred = nil
	for _, m := range deferred {
		c.handleCall(m)
	}
}

// failServing stops serving after a failure found once serving began
// (the allocator refused the restored IDs: a bug, or maps changed under
// us). Later calls fail with err; restarting the engine restores again.
func (c *Core) failServing(err error) {
	if c.stopping {
		return
	}
	err = fmt.Errorf("restore: allocator: %w", err)
	c.log.WithError(err).Error("restore from the pinned maps failed")
	c.ready = false
	c.readyErr = err
	c.abortAll(err) // ops that came after the snapshot: none has written yet
	c.cfg.OnDown()
	c.cfg.OnRestoreFailed(err)
}

func (c *Core) recordRestore(r *table.Restored) {
	st := messages.RestoreStats{
		Services:      len(r.Services),
		OrphanRevNAT:  len(r.OrphanRevNAT),
		Repairs:       len(r.Repairs),
		RepairsByKind: map[string]int{},
		Writes:        r.Fixes4.Writes() + r.Fixes6.Writes() + r.Members.Writes() + len(r.SourceRanges.Writes) + len(r.SourceRanges.Deletes),
	}
	// The backends in use: install indexed each once, by key (Rebuild
	// gives one key one ID, and one ID one key), into a table that held
	// nothing else.
	st.Backends = c.users.Len()
	for _, rep := range r.Repairs {
		st.RepairsByKind[string(rep.Kind)]++
		c.log.WithFields(logrus.Fields{
			"repair": rep.Kind, "family": rep.Family.String(), "serviceID": rep.ServiceID,
			"frontend": rep.Frontend, "backendID": rep.BackendID,
		}).Warn("restore repaired the maps: " + rep.Detail)
	}
	c.restore = st
	c.log.WithFields(logrus.Fields{"services": st.Services, "backends": st.Backends, "repairs": st.Repairs, "writes": st.Writes}).Info("restored from pinned maps")
}

// flushAll is the "restore off" plan: every entry of every map is deleted.
func flushAll(d table.Dump) *table.Restored {
	r := &table.Restored{}
	for _, fam := range []struct {
		f   maps.Family
		svc []maps.ServiceEntry
		be  []maps.BackendEntry
		rev []maps.RevNATEntry
	}{{maps.IPv4, d.Services4, d.Backends4, d.RevNAT4}, {maps.IPv6, d.Services6, d.Backends6, d.RevNAT6}} {
		fx := r.Fixes(fam.f)
		for _, e := range fam.svc {
			if e.Key.Slot == 0 {
				fx.MasterDeletes = append(fx.MasterDeletes, e.Key)
			} else {
				fx.SlotDeletes = append(fx.SlotDeletes, e.Key)
			}
		}
		for _, e := range fam.be {
			fx.BackendDeletes = append(fx.BackendDeletes, e.ID)
		}
		for _, e := range fam.rev {
			fx.RevNATDeletes = append(fx.RevNATDeletes, e.ID)
		}
		sort.Slice(fx.BackendDeletes, func(i, j int) bool { return fx.BackendDeletes[i] < fx.BackendDeletes[j] })
	}
	for _, e := range d.Members {
		r.Members.MemberDeletes = append(r.Members.MemberDeletes, e.Key)
	}
	r.Members.MatchDeletes = d.AffinityMatch
	r.SourceRanges.Deletes = d.SourceRanges
	return r
}
