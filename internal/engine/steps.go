package engine

import (
	"slices"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// Step names: Stats.Steps times each by these names, and errors say which
// step failed with them.
const (
	StepQueued               = "wait in queue" // behind other ops on the same frontend or backend
	StepAcquire              = "acquire IDs"
	StepWriteBackends        = "write backends and revNAT"
	StepWriteService         = "write service"
	StepCommit               = "commit"
	StepDeleteBackends       = "delete backends"
	StepReuseBackendIDs      = "reuse backend IDs"
	StepDeleteService        = "delete service"
	StepDeleteRevNAT         = "delete revNAT"
	StepDeleteBackendsRevNAT = "delete backends and revNAT" // a delete's, after its master and slots
	StepReleaseServiceID     = "release service ID"
	StepRefreshBackends      = "refresh backends and revNAT"
	StepRefreshService       = "refresh service"
	StepReserveID            = "reserve ID"
	StepWriteRevNAT          = "write revNAT"
	StepReleaseID            = "release ID"
	StepDumpMaps             = "dump maps"
	StepRebuild              = "rebuild"
	StepInstall              = "install"
	StepRestoreAllocator     = "restore allocator"
	StepLeaseIDs             = "lease IDs"
	StepReconcile            = "reconcile maps"
	StepRollbackBackends     = "roll back: write backends and revNAT"
	StepRollbackService      = "roll back: write service"
	StepRollbackRevNAT       = "roll back: delete revNAT"
	StepRollbackReleaseIDs   = "roll back: release IDs"
	StepRollbackDeleteBEs    = "roll back: delete backends"
	StepRollbackReuseIDs     = "roll back: reuse backend IDs"
)

// Requests shared by the plans: each sends one request per child (and
// family) for everything given, and nothing when given nothing.

// applyServices sends each family's service map owner its writes (slots
// then masters, make before break) and deletes (masters first).
func (c *Core) applyServices(o *op, writes [2][]maps.ServiceEntry, deletes [2][]maps.ServiceKey) {
	c.serviceRequests(o, writes, deletes, false)
}

// lendServices is applyServices for slices made for these requests alone
// (each writes and deletes slice sent once, none kept by the op): they
// go to the core's spares once answered (spares.go).
func (c *Core) lendServices(o *op, writes [2][]maps.ServiceEntry, deletes [2][]maps.ServiceKey) {
	c.serviceRequests(o, writes, deletes, true)
}

func (c *Core) serviceRequests(o *op, writes [2][]maps.ServiceEntry, deletes [2][]maps.ServiceKey, lent bool) {
	for f := range families {
		if len(writes[f]) > 0 || len(deletes[f]) > 0 {
			c.send(o, svcChild(families[f]), 0, replyErr, &messages.ServiceApply{ReqID: c.reqID(), Writes: writes[f], Deletes: deletes[f]}, lent)
		}
	}
}

// applyBackends is applyServices for the backend maps.
func (c *Core) applyBackends(o *op, writes [2][]maps.BackendEntry, deletes [2][]uint32) {
	c.backendRequests(o, writes, deletes, false)
}

// lendBackendWrites is lendServices for the backend maps' writes.
func (c *Core) lendBackendWrites(o *op, writes [2][]maps.BackendEntry) {
	c.backendRequests(o, writes, [2][]uint32{}, true)
}

func (c *Core) backendRequests(o *op, writes [2][]maps.BackendEntry, deletes [2][]uint32, lent bool) {
	for f := range families {
		if len(writes[f]) > 0 || len(deletes[f]) > 0 {
			c.send(o, beChild(families[f]), 0, replyErr, &messages.BackendApply{ReqID: c.reqID(), Writes: writes[f], Deletes: deletes[f]}, lent)
		}
	}
}

// applyRevNAT sends the revNAT owner writes (of both families) and
// deletes by family.
func (c *Core) applyRevNAT(o *op, writes []maps.RevNATEntry, deletes [2][]uint16) {
	c.revNATRequest(o, writes, deletes, false)
}

// lendRevNATWrites is lendServices for the revNAT owner's writes.
func (c *Core) lendRevNATWrites(o *op, writes []maps.RevNATEntry) {
	c.revNATRequest(o, writes, [2][]uint16{}, true)
}

func (c *Core) revNATRequest(o *op, writes []maps.RevNATEntry, deletes [2][]uint16, lent bool) {
	if len(writes) == 0 && len(deletes[0]) == 0 && len(deletes[1]) == 0 {
		return
	}
	c.send(o, ChildRevNAT, 0, replyErr, &messages.RevNATApply{ReqID: c.reqID(), Writes: writes, Deletes4: deletes[0], Deletes6: deletes[1]}, lent)
}

// applyMembers sends the lb_members owner writes and deletes, and the
// lb_affinity_match owner its own: nothing when there is nothing.
func (c *Core) applyMembers(o *op, writes []maps.MemberEntry, deletes []maps.MemberKey, mw, md []maps.AffinityMatchKey) {
	if len(writes) > 0 || len(deletes) > 0 {
		c.request(o, ChildMembers, 0, replyErr, &messages.MemberApply{ReqID: c.reqID(), Writes: writes, Deletes: deletes})
	}
	if len(mw) > 0 || len(md) > 0 {
		c.request(o, ChildAffinity, 0, replyErr, &messages.AffinityMatchApply{ReqID: c.reqID(), Writes: mw, Deletes: md})
	}
}

// applyRanges sends the source-range owner its writes and deletes (both
// families): nothing when there is nothing.
func (c *Core) applyRanges(o *op, writes, deletes []maps.SourceRangeKey) {
	if len(writes) > 0 || len(deletes) > 0 {
		c.request(o, ChildSourceRange, 0, replyErr, &messages.SourceRangeApply{ReqID: c.reqID(), Writes: writes, Deletes: deletes})
	}
}

// notIn returns the elements of from that want does not have, in from's
// order (nil if none). A short want is scanned, a longer one indexed.
func notIn[T comparable](from, want []T) []T {
	if len(from) == 0 {
		return nil
	}
	var out []T
	if len(want) <= notInScanMax {
		for _, x := range from {
			if !slices.Contains(want, x) {
				out = append(out, x)
			}
		}
		return out
	}
	keep := make(map[T]bool, len(want))
	for _, x := range want {
		keep[x] = true
	}
	for _, x := range from {
		if !keep[x] {
			out = append(out, x)
		}
	}
	return out
}

// notInScanMax is the longest want notIn scans rather than indexes.
const notInScanMax = 64

// maglevTable returns what svc's Maglev table is built from, and whether
// svc has one (table.MaglevBackends).
func maglevTable(svc *table.Service) (messages.MaglevTable, bool) {
	bs := table.MaglevBackends(svc)
	if bs == nil {
		return messages.MaglevTable{}, false
	}
	return messages.MaglevTable{ID: svc.ID(), Family: svc.Family(), Backends: bs}, true
}

// maglevs collects the Maglev writes and deletes of a step.
type maglevs struct {
	writes  []messages.MaglevTable
	deletes [2][]lb.ServiceID
}

// put writes svc's table, or deletes it if svc has none but had may have
// had one (was a maglev service).
func (m *maglevs) put(svc, had *table.Service) {
	if t, ok := maglevTable(svc); ok {
		m.writes = append(m.writes, t)
		return
	}
	if had != nil && had.Spec.LBAlgorithm == lb.LBAlgMaglev {
		m.drop(had)
	}
}

// drop deletes svc's table if it is a maglev service.
func (m *maglevs) drop(svc *table.Service) {
	if svc.Spec.LBAlgorithm == lb.LBAlgMaglev {
		f := famIndex(svc.Family())
		m.deletes[f] = append(m.deletes[f], svc.ID())
	}
}

// applyMaglev sends the Maglev owner the writes and deletes: nothing when
// there is nothing (a service that is not and was not maglev never reaches
// it).
func (c *Core) applyMaglev(o *op, m maglevs) {
	if len(m.writes) == 0 && len(m.deletes[0]) == 0 && len(m.deletes[1]) == 0 {
		return
	}
	c.request(o, ChildMaglev, 0, replyErr, &messages.MaglevApply{ReqID: c.reqID(), Writes: m.writes, Deletes4: m.deletes[0], Deletes6: m.deletes[1]})
}

// memberKeysNotIn returns the keys of from that want does not have.
func memberKeysNotIn(from, want []maps.MemberEntry) []maps.MemberKey {
	keep := make(map[maps.MemberKey]bool, len(want))
	for _, w := range want {
		keep[w.Key] = true
	}
	var out []maps.MemberKey
	for _, e := range from {
		if !keep[e.Key] {
			out = append(out, e.Key)
		}
	}
	return out
}

// appendInnerKeys appends the internal-scope keys of fe to dst: its
// master (if master) and slots from..to.
func appendInnerKeys(dst []maps.ServiceKey, fe lb.L3n4Addr, master bool, from, to int) []maps.ServiceKey {
	if master {
		dst = append(dst, table.ScopeKey(fe, lb.ScopeInternal, 0))
	}
	for i := max(from, 1); i <= to; i++ {
		dst = append(dst, table.ScopeKey(fe, lb.ScopeInternal, uint16(i)))
	}
	return dst
}

// staleKeys returns the service map keys to delete after svc is written
// over a frontend whose entries may reach maxExt slots at its scope and
// maxInt at the internal one (hadInt: an internal master may be there):
// slots beyond svc's counts, and the internal set if svc has none.
func staleKeys(svc *table.Service, maxExt, maxInt int, hadInt bool) []maps.ServiceKey {
	fe := svc.Frontend()
	out := slotKeys(fe, table.SlotCount(svc)+1, maxExt)
	if svc.Spec.TwoScopes() {
		return appendInnerKeys(out, fe, false, table.SlotCountAt(svc, lb.ScopeInternal)+1, maxInt)
	}
	if hadInt || maxInt > 0 {
		out = appendInnerKeys(out, fe, true, 1, maxInt)
	}
	return out
}

// keyCount returns the number of service map keys svc occupies (those
// appendAllKeys appends).
func keyCount(svc *table.Service) int {
	n := 1 + table.SlotCount(svc)
	if svc.Spec.TwoScopes() {
		n += 1 + table.SlotCountAt(svc, lb.ScopeInternal)
	}
	return n
}

// appendAllKeys appends every service map key svc occupies to dst, each
// scope's master first (the delete order).
func appendAllKeys(dst []maps.ServiceKey, svc *table.Service) []maps.ServiceKey {
	dst = appendSlotKeys(dst, svc.Frontend(), 0, table.SlotCount(svc))
	if svc.Spec.TwoScopes() {
		dst = appendInnerKeys(dst, svc.Frontend(), true, 1, table.SlotCountAt(svc, lb.ScopeInternal))
	}
	return dst
}

// slotKeys returns the service map keys of slots from..to of fe.
func slotKeys(fe lb.L3n4Addr, from, to int) []maps.ServiceKey {
	if from > to {
		return nil
	}
	return appendSlotKeys(make([]maps.ServiceKey, 0, to-from+1), fe, from, to)
}

// appendSlotKeys appends the service map keys of slots from..to of fe to
// dst.
func appendSlotKeys(dst []maps.ServiceKey, fe lb.L3n4Addr, from, to int) []maps.ServiceKey {
	for i := from; i <= to; i++ {
		dst = append(dst, table.Key(fe, uint16(i)))
	}
	return dst
}

// releaser deletes the backends that an op left unbound (no service
// uses them, no op holds them: the backend index forgot them), then lets
// the allocator reuse their IDs: the release steps of the upsert and
// delete plans and their rollbacks.
type releaser struct {
	freed [2][]uint32 // freed backend IDs by family, to delete
}

// releaseServices gives the service IDs of fes back to the allocator
// (none: no request); the op holds them until the reply.
func (c *Core) releaseServices(o *op, fes []lb.L3n4Addr) {
	if len(fes) == 0 {
		return
	}
	c.request(o, ChildAllocator, 0, releasedServices, &messages.AllocRelease{ReqID: c.reqID(), Frontends: fes})
}

// releasedServices folds the release of the service IDs.
func releasedServices(o *op, _ int, reply any) error {
	o.svcHolds = nil
	return reply.(*messages.AllocReleased).Err
}

// expectFrees makes room for up to n[f] more freed backend IDs of family
// index f, so that freeing a service's backends one by one does not grow
// the lists through every size on the way.
func (r *releaser) expectFrees(o *op, n [2]int) {
	for f := range n {
		r.freed[f] = slices.Grow(r.freed[f], n[f])
	}
	o.freed = slices.Grow(o.freed, n[0]+n[1])
}

// free records that backend ID id, of a service of family f, is unbound:
// its entry is deleted (deleteFreed), then the ID is reused (reuse). The
// op holds it meanwhile (o.freed: in use for a restarted allocator).
func (r *releaser) free(o *op, f maps.Family, id lb.BackendID) {
	r.freed[famIndex(f)] = append(r.freed[famIndex(f)], uint32(id))
	o.freed = append(o.freed, uint32(id))
}

// deleteFreed deletes the backends the release freed.
func (r *releaser) deleteFreed(c *Core, o *op) {
	c.applyBackends(o, [2][]maps.BackendEntry{}, r.freed)
}

// reuse lets the backend IDs the op freed be reused: those the ID lease
// has room for join it (keepFreed), the others go back to the allocator.
func (r *releaser) reuse(c *Core, o *op) {
	// The op holds only those it gives back (the snapshot counts the
	// others in the lease).
	o.freed = o.freed[:copy(o.freed, c.keepFreed(o.freed))]
	if len(o.freed) == 0 {
		return
	}
	ids := make([]lb.BackendID, len(o.freed))
	for i, id := range o.freed {
		ids[i] = lb.BackendID(id)
	}
	c.request(o, ChildAllocator, 0, unheld, &messages.AllocUnhold{ReqID: c.reqID(), BackendIDs: ids})
}

// unheld folds the reply to AllocUnhold: the op holds no freed ID.
func unheld(o *op, _ int, reply any) error {
	o.freed = nil
	return replyErr(o, 0, reply)
}
