package engine

import (
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
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

// opPool keeps single calls' ops for reuse.
type opPool struct {
	upserts []*upsertOne
	deletes []*deleteOne
	// Completed during the input being stepped.
	spentUpserts []*upsertOne
	spentDeletes []*deleteOne
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
// call's op.
func (p *opPool) completed(o *op) {
	switch pl := o.plan.(type) {
	case *upsertPlan:
		if pl.pooled != nil {
			p.spentUpserts = append(p.spentUpserts, pl.pooled)
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
}
