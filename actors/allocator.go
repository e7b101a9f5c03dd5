package actors

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/engine"
	"github.com/actorlb/actorlb/internal/idalloc"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// allocatorActor owns the service and backend ID spaces. Its state lives
// only in memory: after a restart it is empty until the supervisor sends
// AllocRestore, built from the table.
//
// The supervisor's lease (AllocLease) is a set of free IDs per space that
// the allocator holds for it: it binds them later (AllocBind,
// AllocAcquire.LeasedID, AllocReserve.Leased) without asking first. A
// leased ID leaves the lease when a request names it, bound if the request
// succeeds and free if it fails, or when AllocUnhold names it (the
// supervisor gives it back).
type allocatorActor struct {
	svc *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID]
	be  *idalloc.Allocator[addrkey.Backend, lb.BackendID]
	// The IDs leased to the supervisor and not bound yet; svc and be hold
	// them. A few hundred at most (see maxLeased).
	leasedSvcs lease[lb.ServiceID]
	leasedBes  lease[lb.BackendID]
	// restarted is set on every incarnation but the first: the state is
	// gone, so requests wait (in arrival order) until AllocRestore.
	restarted bool
	waiting   []queued
}

type queued struct {
	sender *actor.PID
	msg    any
}

// newAllocatorProducer returns the allocator's producer; it counts
// incarnations so that a restarted allocator knows it must be restored.
func newAllocatorProducer() actor.Producer {
	var incarnations atomic.Int64
	return func() actor.Actor {
		return &allocatorActor{
			svc:        newServiceIDs(0),
			be:         newBackendIDs(0),
			leasedSvcs: lease[lb.ServiceID]{},
			leasedBes:  lease[lb.BackendID]{},
			restarted:  incarnations.Add(1) > 1,
		}
	}
}

func (a *allocatorActor) Receive(ctx actor.Context) {
	if b, ok := ctx.Message().(*messages.Batch); ok && len(b.Msgs) >= reserveMin {
		a.reserve(b.Msgs)
	}
	// In order, as if one by one; the answers go back in one message.
	var replies []any
	messages.EachRequest(ctx.Message(), func(m any) { replies = a.receive(ctx, m, replies) })
	respond(ctx, replies)
}

// reserveMin is the number of requests (allocator) or entries (mirrors)
// in one message from which an empty owner sizes its index for them at
// once rather than growing it by doubling.
const reserveMin = 256

// reserve makes room in the empty allocators for the keys that msgs
// acquire or bind (a batch creating a cluster's services into an empty
// engine).
func (a *allocatorActor) reserve(msgs []any) {
	var svcs, bes int
	for _, m := range msgs {
		switch m := m.(type) {
		case *messages.AllocAcquire:
			if m.Service {
				svcs++
			}
			bes += len(m.Backends)
		case *messages.AllocBind:
			if m.ServiceID != 0 {
				svcs++
			}
			bes += len(m.Backends)
		}
	}
	a.svc.Reserve(svcs)
	a.be.Reserve(bes)
}

// receive handles one request and appends its answer to replies (none
// while it waits for AllocRestore).
func (a *allocatorActor) receive(ctx actor.Context, msg any, replies []any) []any {
	switch msg.(type) {
	case *messages.AllocAcquire, *messages.AllocRelease, *messages.AllocUnhold, *messages.AllocReserve, *messages.AllocDrop,
		*messages.AllocLease, *messages.AllocBind:
		if a.restarted {
			a.waiting = append(a.waiting, queued{ctx.Sender(), msg})
			return replies
		}
	case *messages.AllocRestore:
		replies = append(replies, a.handle(msg))
		a.restarted = false
		for _, q := range a.waiting {
			ctx.Send(q.sender, a.handle(q.msg))
		}
		a.waiting = nil
		return replies
	default:
		return replies
	}
	return append(replies, a.handle(msg))
}

// respond answers the sender with replies: one bare reply or Replies.
func respond(ctx actor.Context, replies []any) {
	switch len(replies) {
	case 0:
	case 1:
		ctx.Respond(replies[0])
	default:
		ctx.Respond(&messages.Replies{Msgs: replies})
	}
}

func (a *allocatorActor) handle(msg any) any {
	switch m := msg.(type) {
	case *messages.AllocAcquire:
		return a.acquire(m)
	case *messages.AllocRelease:
		return a.release(m)
	case *messages.AllocUnhold:
		// A leased ID named here is given back: it leaves the lease.
		for _, id := range m.ServiceIDs {
			a.leasedSvcs.drop(id)
			a.svc.Unhold(id)
		}
		for _, id := range m.BackendIDs {
			a.leasedBes.drop(id)
			a.be.Unhold(id)
		}
		return &messages.AllocDone{ReqID: m.ReqID}
	case *messages.AllocRestore:
		return &messages.AllocDone{ReqID: m.ReqID, Err: a.restore(m)}
	case *messages.AllocReserve:
		return &messages.AllocDone{ReqID: m.ReqID, Err: a.reserveID(m)}
	case *messages.AllocLease:
		return a.lease(m)
	case *messages.AllocBind:
		return &messages.AllocDone{ReqID: m.ReqID, Err: a.bind(m)}
	case *messages.AllocDrop:
		return &messages.AllocDone{ReqID: m.ReqID, Err: a.svc.DropReservation(m.Key)}
	}
	return nil
}

// acquire is all or nothing: on any error, what it took is given back.
// Its LeasedID leaves the lease either way: bound, or free on failure.
func (a *allocatorActor) acquire(m *messages.AllocAcquire) *messages.AllocAcquired {
	r := a.tryAcquire(m)
	if m.LeasedID != 0 && a.leasedSvcs.drop(m.LeasedID) {
		a.svc.Unhold(m.LeasedID) // a no-op once bound
	}
	return r
}

// tryAcquire takes what m asks for; on an error it gives it back.
func (a *allocatorActor) tryAcquire(m *messages.AllocAcquire) *messages.AllocAcquired {
	r := &messages.AllocAcquired{ReqID: m.ReqID}
	if m.LeasedID != 0 && (!m.Service || (m.WantID != 0 && m.WantID != m.LeasedID)) {
		r.Err = fmt.Errorf("acquire service ID for %s: leased ID %d needs Service set and WantID 0 or %d (service %t, WantID %d)",
			m.Frontend, m.LeasedID, m.LeasedID, m.Service, m.WantID)
		return r
	}
	if m.Service {
		var err error
		switch {
		case m.LeasedID != 0:
			err = bindLeased(a.svc, a.leasedSvcs, m.Frontend, m.LeasedID)
			r.ServiceID = m.LeasedID
		case m.WantID != 0:
			_, err = a.svc.AcquireID(m.Frontend, m.WantID)
			r.ServiceID = m.WantID
		default:
			r.ServiceID, _, err = a.svc.Acquire(m.Frontend)
		}
		if err != nil {
			r.Err = serviceIDError("acquire", m.Frontend, r.ServiceID, err)
			return r
		}
	}
	r.BackendIDs = make([]lb.BackendID, 0, len(m.Backends))
	for _, k := range m.Backends {
		id, _, err := a.be.Acquire(addrkey.BackendOf(k))
		if err != nil {
			for _, k := range m.Backends[:len(r.BackendIDs)] {
				a.be.Release(addrkey.BackendOf(k))
			}
			if m.Service {
				a.svc.Release(m.Frontend)
			}
			r.Err = fmt.Errorf("acquire backend ID for %s: %w", k, err)
			r.BackendIDs = nil
			return r
		}
		r.BackendIDs = append(r.BackendIDs, id)
	}
	return r
}

// serviceIDError is the error of op (acquire, bind) binding fe to the
// service ID id (0: the next free one).
func serviceIDError(op string, fe lb.L3n4Addr, id lb.ServiceID, err error) error {
	var conflict *idalloc.ConflictError
	var bound *idalloc.KeyBoundError
	switch {
	case errors.As(err, &conflict):
		return fmt.Errorf("%w: service ID %d is already registered to %v", engine.ErrServiceIDInUse, id, conflict.Key)
	case errors.As(err, &bound):
		return fmt.Errorf("%w: frontend %s is already registered with ID %d", engine.ErrFrontendInUse, fe, bound.ID)
	case errors.Is(err, idalloc.ErrIDSpaceExhausted):
		return fmt.Errorf("%s service ID for %s: %w", op, fe, engine.ErrIDSpaceExhausted)
	case errors.Is(err, idalloc.ErrIDHeld):
		return fmt.Errorf("%w: service ID %d is still being released by its previous owner (retry)", engine.ErrServiceIDInUse, id)
	case errors.Is(err, errNotLeased):
		return fmt.Errorf("%s service ID %d for %s: %w", op, id, fe, err)
	}
	return fmt.Errorf("%s service ID for %s: %w", op, fe, err)
}

// maxLeased bounds each lease: a supervisor that leases without binding
// (a bug) gets no more IDs rather than holding a whole space.
const maxLeased = 4096

// lease is the set of IDs leased to the supervisor in one space.
type lease[I idalloc.ID] map[I]struct{}

// drop takes id out of the set and reports whether it was in it.
func (l lease[I]) drop(id I) bool {
	_, ok := l[id]
	delete(l, id)
	return ok
}

// take leases up to n more IDs of ids (at most maxLeased in all) and adds
// them to l.
func take[K comparable, I idalloc.ID](ids *idalloc.Allocator[K, I], l lease[I], n int) []I {
	got := ids.Lease(min(n, maxLeased-len(l)))
	for _, id := range got {
		l[id] = struct{}{}
	}
	return got
}

// bindLeased binds key to id, which must be in l: it unholds id and binds
// it. id stays in l: the caller takes it out, whatever the outcome.
func bindLeased[K comparable, I idalloc.ID](ids *idalloc.Allocator[K, I], l lease[I], key K, id I) error {
	if _, ok := l[id]; !ok {
		return errNotLeased
	}
	ids.Unhold(id)
	_, err := ids.AcquireID(key, id)
	return err
}

// lease answers AllocLease: up to the IDs asked for, fewer (or none) when
// a space runs low.
func (a *allocatorActor) lease(m *messages.AllocLease) *messages.AllocLeased {
	r := &messages.AllocLeased{ReqID: m.ReqID}
	if m.Services < 0 || m.Backends < 0 {
		r.Err = fmt.Errorf("lease: services %d, backends %d: counts must not be negative", m.Services, m.Backends)
		return r
	}
	r.ServiceIDs = take(a.svc, a.leasedSvcs, m.Services)
	r.BackendIDs = take(a.be, a.leasedBes, m.Backends)
	return r
}

// bind answers AllocBind, all or nothing. The leased IDs it names leave
// the lease either way: bound, or free if it fails (after what it did is
// undone).
func (a *allocatorActor) bind(m *messages.AllocBind) error {
	err := a.tryBind(m)
	if m.ServiceID != 0 && a.leasedSvcs.drop(m.ServiceID) {
		a.svc.Unhold(m.ServiceID) // a no-op once bound
	}
	for _, id := range m.BackendIDs {
		if a.leasedBes.drop(id) {
			a.be.Unhold(id)
		}
	}
	return err
}

// tryBind binds what m names; on an error it undoes what it did.
func (a *allocatorActor) tryBind(m *messages.AllocBind) error {
	if len(m.BackendIDs) != len(m.Backends) {
		return fmt.Errorf("bind: %d backend IDs for %d backends", len(m.BackendIDs), len(m.Backends))
	}
	if m.ServiceID != 0 {
		if err := bindLeased(a.svc, a.leasedSvcs, m.Frontend, m.ServiceID); err != nil {
			return serviceIDError("bind", m.Frontend, m.ServiceID, err)
		}
	}
	for i, k := range m.Backends {
		if err := a.bindBackend(addrkey.BackendOf(k), m.BackendIDs[i]); err != nil {
			for _, k := range m.Backends[:i] {
				_, _, _ = a.be.Release(addrkey.BackendOf(k)) // each took one reference
			}
			if m.ServiceID != 0 {
				_, _, _ = a.svc.Release(m.Frontend)
			}
			return fmt.Errorf("bind backend %s to ID %d: %w", k, m.BackendIDs[i], err)
		}
	}
	return nil
}

// bindBackend takes a reference on key for id: key bound already must be
// bound to id; key not bound is bound to id, which must be leased.
func (a *allocatorActor) bindBackend(key addrkey.Backend, id lb.BackendID) error {
	if got, _, ok := a.be.Lookup(key); ok {
		if got != id {
			return fmt.Errorf("the backend is already registered with ID %d", got)
		}
		_, _, err := a.be.Acquire(key)
		return err
	}
	return bindLeased(a.be, a.leasedBes, key, id)
}

// reserveID answers AllocReserve. A leased ID leaves the lease first: it
// is reserved, or free if the reservation fails.
func (a *allocatorActor) reserveID(m *messages.AllocReserve) error {
	if m.Leased {
		if !a.leasedSvcs.drop(m.ID) {
			return fmt.Errorf("reserve service ID %d for %s: %w", m.ID, m.Key, errNotLeased)
		}
		a.svc.Unhold(m.ID)
	}
	if err := a.svc.Restore(m.Key, m.ID); err != nil {
		return fmt.Errorf("%w: service ID %d: %v", engine.ErrServiceIDInUse, m.ID, err)
	}
	return nil
}

func (a *allocatorActor) release(m *messages.AllocRelease) *messages.AllocReleased {
	r := &messages.AllocReleased{ReqID: m.ReqID}
	var errs []error
	for _, k := range m.Backends {
		id, freed, err := a.be.Release(addrkey.BackendOf(k))
		if err != nil {
			errs = append(errs, fmt.Errorf("release backend %s: %w", k, err))
			continue
		}
		if freed {
			_ = a.be.Hold(id)
			r.FreedBackends = append(r.FreedBackends, id)
		}
	}
	for _, fe := range m.Frontends {
		if _, _, err := a.svc.Release(fe); err != nil {
			errs = append(errs, fmt.Errorf("release service %s: %w", fe, err))
		}
	}
	r.Err = errors.Join(errs...)
	return r
}

func (a *allocatorActor) restore(m *messages.AllocRestore) error {
	a.svc = newServiceIDs(len(m.Services))
	a.be = newBackendIDs(len(m.Backends))
	var errs []error
	for _, b := range m.Services {
		if err := bind(a.svc, b.Key, lb.ServiceID(b.ID), b.Refs); err != nil {
			errs = append(errs, err)
		}
	}
	for _, b := range m.Backends {
		if err := bind(a.be, addrkey.BackendOf(b.Key), lb.BackendID(b.ID), b.Refs); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range m.Held {
		if err := a.be.Hold(id); err != nil {
			errs = append(errs, fmt.Errorf("restore: hold backend ID %d: %w", id, err))
		}
	}
	a.leasedSvcs, a.leasedBes = lease[lb.ServiceID]{}, lease[lb.BackendID]{}
	errs = append(errs, restoreLease(a.svc, a.leasedSvcs, m.LeasedServices, "service"),
		restoreLease(a.be, a.leasedBes, m.LeasedBackends, "backend"))
	return errors.Join(errs...)
}

// restoreLease holds ids and records them in l (what: service, backend).
func restoreLease[K comparable, I idalloc.ID](ids *idalloc.Allocator[K, I], l lease[I], leased []I, what string) error {
	var errs []error
	for _, id := range leased {
		if err := ids.Hold(id); err != nil {
			errs = append(errs, fmt.Errorf("restore: lease %s ID %d: %w", what, id, err))
			continue
		}
		l[id] = struct{}{}
	}
	return errors.Join(errs...)
}

func bind[K comparable, I idalloc.ID](a *idalloc.Allocator[K, I], key K, id I, refs int) error {
	if err := a.Restore(key, id); err != nil {
		return fmt.Errorf("restore %v -> %d: %w", key, id, err)
	}
	for range refs {
		if _, _, err := a.Acquire(key); err != nil {
			return fmt.Errorf("restore %v -> %d: %w", key, id, err)
		}
	}
	return nil
}

// Keys of the allocator and the supervisor's indexes. IPv4 services and
// backends, and IPv6 backends of the /104 prefixes the packer learns,
// have their keys kept packed in 8 bytes (internal/packedmap), the others
// whole.

// newBackendIDs returns the backend ID allocator, with room for n
// backends: IPv4 backends' keys, and IPv6 ones of learnt prefixes, are
// kept packed in 8 bytes.
func newBackendIDs(n int) *idalloc.Allocator[addrkey.Backend, lb.BackendID] {
	return idalloc.NewCompact[addrkey.Backend, lb.BackendID](math.MaxUint32, n, addrkey.NewBackendPacker())
}

// newServiceIDs returns the service ID allocator, with room for n
// frontends: IPv4 frontends are kept packed.
func newServiceIDs(n int) *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID] {
	return idalloc.NewCompact[lb.L3n4Addr, lb.ServiceID](lb.MaxServiceID, n, addrkey.NewFrontendPacker())
}
