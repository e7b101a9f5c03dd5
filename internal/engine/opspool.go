package engine

import (
	"slices"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// A single call's op (an Upsert's, a Delete's) is one object with its
// plan, item and waiter (upsertOne, deleteOne): some 1.1 KB with an
// upsert's queue keys, 0.7 KB for a delete. Once complete it is reused
// for the next single call instead of left to the collector: complete
// hands it to the pool, and the pool takes it back only when the input
// being stepped is done (Step), so that code of the same input that still
// holds the op never reads a zeroed one (the lease's wake loop reads the
// done flag of each op it woke after advancing the others). Nothing else
// refers to a completed op: it left its queues (dequeue), its requests
// are all answered (a request sent twice and answered once may still sit
// in the outbox, whose sends never read its op), and an op waiting for
// the lease has a reply pending and cannot complete. An op completed
// otherwise (split into others, aborted on Stop) is never reused.

// opsKept bounds the single calls' ops the pool keeps, of each kind.
const opsKept = 32

// oldKeptMax bounds the backends the arrays of a kept op's old service,
// and the IDs' array of its new one, hold (a call on a service of
// thousands does not leave its arrays in the pool).
const oldKeptMax = 128

// oldService is where a single call's op reads the service it replaces or
// deletes (svcTable.expandInto), its arrays kept when the op is reused.
type oldService struct {
	svc table.Service
	bes []lb.Backend
	ids []lb.BackendID
}

// read returns service s whole, in o.
func (o *oldService) read(t *svcTable, s *storedService) *table.Service {
	return t.expandInto(s, &o.svc, &o.bes, &o.ids)
}

// kept returns o emptied for reuse: its arrays if small enough.
func (o *oldService) kept() oldService {
	if cap(o.bes) > oldKeptMax || cap(o.ids) > oldKeptMax {
		return oldService{}
	}
	return oldService{bes: o.bes[:0], ids: o.ids[:0]}
}

// newService is where a single call's op makes the service it writes
// (newTableServiceIn), its IDs' array kept when the op is reused: nothing
// refers to the service once the op is complete (the table keeps its own
// form of it, svcTable.put; the requests carry map entries).
type newService struct {
	svc table.Service
	ids []lb.BackendID
}

// make returns the table's form of spec, in n.
func (n *newService) make(spec *lb.Service) *table.Service {
	svc := newTableServiceIn(spec, &n.svc, n.ids)
	n.ids = svc.BackendIDs
	return svc
}

// kept returns n emptied for reuse: its IDs' array if small enough.
func (n *newService) kept() newService {
	if cap(n.ids) > oldKeptMax {
		return newService{}
	}
	return newService{ids: n.ids[:0]}
}

// opPool keeps single calls' ops for reuse, and the arrays of the runs
// of large calls (UpsertBatch, Sync; runArrays): the queue keys
// startUpserts gives a run's op, its plan's items (newRunPlan), the
// backend index lists, services and backend IDs upsertPlan.start makes
// for a plan that is not a single call's, some 750 bytes a 10-backend
// service, and the service IDs the op holds (roomForHolds, 48 bytes a new
// service), which the next wave of calls takes again instead of making
// new ones. A run's arrays are given back when its op completes, not when
// it is split or aborted (another op may still read them), and kept up
// to runArraysKept of each kind, of some 0.4 MB at most each, until the
// core is quiet (Quiet).
type opPool struct {
	upserts []*upsertOne
	deletes []*deleteOne
	run     runArrays
	// Completed during the input being stepped.
	spentUpserts []*upsertOne
	spentDeletes []*deleteOne
	spent        runArrays
}

// runArrays are arrays of the runs of large calls, by kind: the op's
// queue keys, its plan's items, their backend index lists, the services
// they write and those's backend IDs, and the service IDs the op holds.
type runArrays struct {
	keys  [][]qkey
	items [][]upsertItem
	idx   [][]int
	svcs  [][]table.Service
	ids   [][]lb.BackendID
	holds [][]messages.AllocBinding
}

// The bounds of the run arrays the pool keeps: how many of each kind, and
// their largest size, some 0.4 MB (a larger one, a Sync's of thousands of
// services, goes to the collector).
const (
	runArraysKept = 8
	keptKeysMax   = 1 << 14 // 24 bytes each
	keptItemsMax  = 1 << 11 // 208 bytes each (the services they write: 184)
	keptIntsMax   = 1 << 15 // the index lists, the backend IDs
)

// takeKeys returns an empty array of room for n queue keys: a kept one
// if one has room, else a new one.
func (p *opPool) takeKeys(n int) []qkey { return takeArray(&p.run.keys, n)[:0] }

// takeItems, takeIdx, takeSvcs and takeIDs return an array of room for n,
// as takeKeys; its elements are what the last op left in them (the
// pointerful kinds are cleared when given back), and their users write
// each one they read.
func (p *opPool) takeItems(n int) []upsertItem   { return takeArray(&p.run.items, n) }
func (p *opPool) takeIdx(n int) []int            { return takeArray(&p.run.idx, n) }
func (p *opPool) takeSvcs(n int) []table.Service { return takeArray(&p.run.svcs, n) }
func (p *opPool) takeIDs(n int) []lb.BackendID   { return takeArray(&p.run.ids, n) }

// takeHolds returns an empty array of room for n service IDs held
// (op.svcHolds), as takeKeys.
func (p *opPool) takeHolds(n int) []messages.AllocBinding { return takeArray(&p.run.holds, n)[:0] }

// takeArray takes the first kept array with room for n, or makes one.
func takeArray[T any](kept *[][]T, n int) []T {
	for i, a := range *kept {
		if cap(a) >= n {
			*kept = slices.Delete(*kept, i, i+1)
			return a[:cap(a)]
		}
	}
	return make([]T, n)
}

// keepArrays moves the spent arrays to the kept ones, within the bounds
// (max elements), cleared first if clean (of pointers, which would keep
// what they point to alive).
func keepArrays[T any](kept, spent *[][]T, max int, clean bool) {
	for i, a := range *spent {
		(*spent)[i] = nil
		if len(*kept) < runArraysKept && cap(a) > 0 && cap(a) <= max {
			if clean {
				clear(a[:cap(a)]) // a may be empty, its elements past it (takeHolds)
			}
			*kept = append(*kept, a[:0])
		}
	}
	*spent = (*spent)[:0]
}

// keep moves the spent run arrays to the kept ones (opPool.reuse).
func (r *runArrays) keep(spent *runArrays) {
	keepArrays(&r.keys, &spent.keys, keptKeysMax, false)
	keepArrays(&r.items, &spent.items, keptItemsMax, true)
	keepArrays(&r.idx, &spent.idx, keptIntsMax, false)
	keepArrays(&r.svcs, &spent.svcs, keptItemsMax, true)
	keepArrays(&r.ids, &spent.ids, keptIntsMax, false)
	keepArrays(&r.holds, &spent.holds, keptItemsMax, true)
}

// trimRunArrays drops the kept run arrays (the core is quiet).
func (p *opPool) trimRunArrays() { p.run = runArrays{} }

// keepsRunArrays reports whether the pool keeps a run array (Quiet would
// drop it: Core.Resting).
func (p *opPool) keepsRunArrays() bool {
	r := &p.run
	return len(r.keys)+len(r.items)+len(r.idx)+len(r.svcs)+len(r.ids)+len(r.holds) > 0
}

// takeUpsert returns a zero upsertOne but for its arrays.
func (p *opPool) takeUpsert() *upsertOne { return pop(&p.upserts) }

// giveBack returns u, taken and not run (its call failed validation), to
// the pool as a completed op's is: once the input is stepped.
func (p *opPool) giveBack(u *upsertOne) { p.spentUpserts = append(p.spentUpserts, u) }

// takeDelete returns a zero deleteOne but for its old service's arrays.
func (p *opPool) takeDelete() *deleteOne { return pop(&p.deletes) }

// pop takes the last of the kept objects, or a new zero one.
func pop[T any](kept *[]*T) *T {
	n := len(*kept)
	if n == 0 {
		return new(T)
	}
	x := (*kept)[n-1]
	(*kept)[n-1] = nil
	*kept = (*kept)[:n-1]
	return x
}

// completed notes o, which complete has just ended (answered and out of
// its queues), for reuse once the input is stepped, if it is a single
// call's op, and the run arrays it holds, if any.
func (p *opPool) completed(o *op) {
	if o.runKeys {
		p.spent.keys = append(p.spent.keys, o.keys)
	}
	switch pl := o.plan.(type) {
	case *upsertPlan:
		if pl.pooled != nil {
			p.spentUpserts = append(p.spentUpserts, pl.pooled)
		}
		if pl.runItems {
			p.spent.items = append(p.spent.items, pl.items)
		}
		if pl.idx != nil {
			p.spent.idx = append(p.spent.idx, pl.idx)
			p.spent.svcs = append(p.spent.svcs, pl.svcs)
			p.spent.ids = append(p.spent.ids, pl.ids)
		}
		if pl.holds != nil {
			p.spent.holds = append(p.spent.holds, pl.holds)
			o.svcHolds = nil // the op holds nothing once complete
		}
	case *deletePlan:
		if pl.pooled != nil {
			p.spentDeletes = append(p.spentDeletes, pl.pooled)
		}
	}
}

// reuse takes back the ops completed during the input just stepped:
// zeroed (an upsert's keys' and backend index lists' arrays and the old
// service's arrays kept, the last two when small), up to opsKept of each
// kind.
func (p *opPool) reuse() {
	for i, u := range p.spentUpserts {
		p.spentUpserts[i] = nil
		if len(p.upserts) < opsKept {
			idx := u.idx
			if cap(idx) > 2*oldKeptMax {
				idx = nil
			}
			bes := u.bes
			if cap(bes) > oldKeptMax {
				bes = nil
			}
			*u = upsertOne{keys: u.keys[:0], idx: idx, old: u.old.kept(), next: u.next.kept(), bes: bes[:0]}
			p.upserts = append(p.upserts, u)
		}
	}
	p.spentUpserts = p.spentUpserts[:0]
	for i, d := range p.spentDeletes {
		p.spentDeletes[i] = nil
		if len(p.deletes) < opsKept {
			*d = deleteOne{old: d.old.kept()}
			p.deletes = append(p.deletes, d)
		}
	}
	p.spentDeletes = p.spentDeletes[:0]
	p.run.keep(&p.spent)
}
