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

// allocatorActor owns the service and backend ID spaces. Service IDs are
// bound to their frontends here; backend IDs are not bound to any key
// here (the supervisor's backend index binds them), only kept in use from
// their AllocAcquire to their AllocUnhold. Its state lives only in
// memory: after a restart it is empty until the supervisor sends
// AllocRestore, built from the table.
type allocatorActor struct {
	svc *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID]
	be  *idalloc.Space[lb.BackendID]
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
			svc:       newServiceIDs(0),
			be:        newBackendIDs(),
			restarted: incarnations.Add(1) > 1,
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

// reserve makes room in the empty service ID allocator for the frontends
// that msgs acquire (a batch creating a cluster's services into an empty
// engine).
func (a *allocatorActor) reserve(msgs []any) {
	var svcs int
	for _, m := range msgs {
		if acq, ok := m.(*messages.AllocAcquire); ok {
			for i := range acq.Items {
				if acq.Items[i].Service {
					svcs++
				}
			}
		}
	}
	a.svc.Reserve(svcs)
}

// receive handles one request and appends its answer to replies (none
// while it waits for AllocRestore).
func (a *allocatorActor) receive(ctx actor.Context, msg any, replies []any) []any {
	switch msg.(type) {
	case *messages.AllocAcquire, *messages.AllocRelease, *messages.AllocUnhold, *messages.AllocReserve, *messages.AllocDrop,
		*messages.AllocLease, *messages.AllocClaim:
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
		for _, id := range m.ServiceIDs {
			a.svc.Unhold(id)
		}
		var errs []error
		for _, id := range m.BackendIDs {
			if err := a.be.Free(id); err != nil {
				errs = append(errs, fmt.Errorf("free backend ID: %w", err))
			}
		}
		return &messages.AllocDone{ReqID: m.ReqID, Err: errors.Join(errs...)}
	case *messages.AllocRestore:
		return &messages.AllocDone{ReqID: m.ReqID, Err: a.restore(m)}
	case *messages.AllocReserve:
		err := a.svc.Restore(m.Key, m.ID)
		if err != nil {
			err = fmt.Errorf("%w: service ID %d: %v", engine.ErrServiceIDInUse, m.ID, err)
		}
		return &messages.AllocDone{ReqID: m.ReqID, Err: err}
	case *messages.AllocDrop:
		return &messages.AllocDone{ReqID: m.ReqID, Err: a.svc.DropReservation(m.Key)}
	case *messages.AllocLease:
		return a.lease(m)
	case *messages.AllocClaim:
		var errs []error
		for _, b := range m.Bindings {
			if err := a.svc.Claim(b.Key, lb.ServiceID(b.ID)); err != nil {
				errs = append(errs, fmt.Errorf("claim leased service ID %d for %s: %w", b.ID, b.Key, err))
			}
		}
		return &messages.AllocDone{ReqID: m.ReqID, Err: errors.Join(errs...)}
	}
	return nil
}

// acquire serves each item of m alone, all or nothing: on an item's
// error, what it took is given back and the next item is served. The
// items' backend IDs share one array. The answer is m.Reuse's arrays,
// where they have the room.
func (a *allocatorActor) acquire(m *messages.AllocAcquire) *messages.AllocAcquired {
	n := 0
	for i := range m.Items {
		n += len(m.Items[i].Backends)
	}
	r := m.Reuse
	m.Reuse = nil
	if r == nil {
		r = &messages.AllocAcquired{}
	}
	r.ReqID = m.ReqID
	if cap(r.Items) >= len(m.Items) {
		r.Items = r.Items[:len(m.Items)]
		clear(r.Items)
	} else {
		r.Items = make([]messages.AcquiredItem, len(m.Items))
	}
	ids := r.IDs[:0]
	if cap(ids) < n {
		ids = make([]lb.BackendID, 0, n)
	}
	for i := range m.Items {
		ids = a.acquireItem(&m.Items[i], &r.Items[i], ids)
	}
	r.IDs = ids
	return r
}

// acquireItem serves it into r, appending its backend IDs to ids (r's
// take the part it appended).
func (a *allocatorActor) acquireItem(it *messages.AcquireItem, r *messages.AcquiredItem, ids []lb.BackendID) []lb.BackendID {
	if it.Service {
		var err error
		if it.WantID != 0 {
			_, err = a.svc.AcquireID(it.Frontend, it.WantID)
			r.ServiceID = it.WantID
		} else {
			r.ServiceID, _, err = a.svc.Acquire(it.Frontend)
		}
		if err != nil {
			r.ServiceID, r.Err = 0, serviceIDError(it, err)
			return ids
		}
	}
	if len(it.Backends) == 0 {
		return ids
	}
	from := len(ids)
	ids, err := a.be.TakeAppend(ids, len(it.Backends))
	if err != nil {
		if it.Service {
			a.svc.Release(it.Frontend)
		}
		r.ServiceID = 0
		r.Err = fmt.Errorf("acquire backend IDs for %d new backends (%s first): %w", len(it.Backends), it.Backends[0].L3n4Addr, err)
		return ids
	}
	r.BackendIDs = ids[from:len(ids):len(ids)]
	return ids
}

// lease grants what it can: a full service ID space leases no service
// ID, and backend IDs are leased only if all that were asked are free.
func (a *allocatorActor) lease(m *messages.AllocLease) *messages.AllocLeased {
	r := &messages.AllocLeased{ReqID: m.ReqID, ServiceIDs: a.svc.Lease(m.ServiceIDs)}
	if ids, err := a.be.Take(m.BackendIDs); err == nil {
		r.BackendIDs = ids
	}
	return r
}

func serviceIDError(m *messages.AcquireItem, err error) error {
	var conflict *idalloc.ConflictError
	var bound *idalloc.KeyBoundError
	switch {
	case errors.As(err, &conflict):
		return fmt.Errorf("%w: service ID %d is already registered to %v", engine.ErrServiceIDInUse, m.WantID, conflict.Key)
	case errors.As(err, &bound):
		return fmt.Errorf("%w: frontend %s is already registered with ID %d", engine.ErrFrontendInUse, m.Frontend, bound.ID)
	case errors.Is(err, idalloc.ErrIDSpaceExhausted):
		return fmt.Errorf("acquire service ID for %s: %w", m.Frontend, engine.ErrIDSpaceExhausted)
	case errors.Is(err, idalloc.ErrIDHeld):
		return fmt.Errorf("%w: service ID %d is still being released by its previous owner (retry)", engine.ErrServiceIDInUse, m.WantID)
	}
	return fmt.Errorf("acquire service ID for %s: %w", m.Frontend, err)
}

func (a *allocatorActor) release(m *messages.AllocRelease) *messages.AllocReleased {
	r := &messages.AllocReleased{ReqID: m.ReqID}
	var errs []error
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
	a.be = newBackendIDs()
	var errs []error
	for _, b := range m.Services {
		if err := bind(a.svc, b.Key, lb.ServiceID(b.ID), b.Refs); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range m.BackendIDs {
		if err := a.be.Claim(id); err != nil {
			errs = append(errs, fmt.Errorf("restore: backend ID: %w", err))
		}
	}
	for _, id := range m.Leased {
		if err := a.svc.Hold(id); err != nil {
			errs = append(errs, fmt.Errorf("restore: leased service ID: %w", err))
		}
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

// newBackendIDs returns the backend ID space (no keys: about one bit per
// ID in use).
func newBackendIDs() *idalloc.Space[lb.BackendID] {
	return idalloc.NewSpace[lb.BackendID](math.MaxUint32)
}

// newServiceIDs returns the service ID allocator, with room for n
// frontends: IPv4 frontends by their run key (addrkey.FrontendRun), so
// that a cluster's services, whose addresses it hands out in order, share
// pages (the core's frontend index keeps them so too); the others packed
// where the packer can.
func newServiceIDs(n int) *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID] {
	return idalloc.NewRuns[lb.L3n4Addr, lb.ServiceID](lb.MaxServiceID, n, engine.FrontendRuns, addrkey.NewFrontendPacker())
}
