package source

import (
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// inbox carries events from the informers' handlers to the goroutine that
// owns the State. A handler never blocks on it (beyond a short mutex): the
// inbox keeps the latest event per object, so it holds at most one entry
// per Service, EndpointSlice and the Node, however long the owner is busy
// in a call to the target, and the owner takes everything pending at
// once. A buffered channel would either block the handlers when full or
// drop events; the informers' own queues hold every notification, not the
// latest per object.
type inbox struct {
	mu       sync.Mutex
	services map[Key]serviceEvent
	slices   map[objID]sliceEvent
	node     *nodeEvent
	// notify has room for one signal: a send that finds it full is
	// dropped, the pending signal covers it.
	notify chan struct{}
}

// serviceEvent is the latest state of a service: obj nil means deleted.
type serviceEvent struct {
	obj     *corev1.Service
	trigger time.Time
}

type sliceEvent struct {
	obj     *discoveryv1.EndpointSlice
	trigger time.Time
}

type nodeEvent struct {
	addrs   []netip.Addr
	deleted bool
}

func newInbox() *inbox {
	return &inbox{
		services: map[Key]serviceEvent{},
		slices:   map[objID]sliceEvent{},
		notify:   make(chan struct{}, 1),
	}
}

func (b *inbox) signal() {
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// earliest keeps the earliest non-zero trigger of a and b.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (b *inbox) putService(k Key, obj *corev1.Service, trigger time.Time) {
	b.mu.Lock()
	old := b.services[k]
	b.services[k] = serviceEvent{obj: obj, trigger: earliest(old.trigger, trigger)}
	b.mu.Unlock()
	b.signal()
}

func (b *inbox) putSlice(id objID, obj *discoveryv1.EndpointSlice, trigger time.Time) {
	b.mu.Lock()
	old := b.slices[id]
	b.slices[id] = sliceEvent{obj: obj, trigger: earliest(old.trigger, trigger)}
	b.mu.Unlock()
	b.signal()
}

func (b *inbox) putNode(ev nodeEvent) {
	b.mu.Lock()
	b.node = &ev
	b.mu.Unlock()
	b.signal()
}

// take returns everything pending and empties the inbox.
func (b *inbox) take() (map[Key]serviceEvent, map[objID]sliceEvent, *nodeEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var svcs map[Key]serviceEvent
	var sls map[objID]sliceEvent
	if len(b.services) > 0 {
		svcs, b.services = b.services, map[Key]serviceEvent{}
	}
	if len(b.slices) > 0 {
		sls, b.slices = b.slices, map[objID]sliceEvent{}
	}
	node := b.node
	b.node = nil
	return svcs, sls, node
}
