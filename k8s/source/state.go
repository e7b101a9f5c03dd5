package source

import (
	"cmp"
	"errors"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/k8s/translate"
	lb "github.com/actorlb/actorlb/loadbalancer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Key names a Kubernetes service: its namespace and name.
type Key struct {
	Namespace, Name string
}

// String returns "namespace/name".
func (k Key) String() string { return k.Namespace + "/" + k.Name }

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// objID names an EndpointSlice: its namespace and name.
type objID struct {
	namespace, name string
}

// applied is what the target holds for a frontend, as far as the state
// knows: the service last written (nil when unknown: a call whose outcome
// is unknown may or may not have written or deleted it) and the key whose
// translation it is.
type applied struct {
	key Key
	svc *lb.Service
}

// refusal is a frontend the target refused for a reason that retrying
// does not cure (another source owns it, the engine finds it invalid).
type refusal struct {
	key    Key
	reason string
}

// collision is a frontend two or more Kubernetes services translate to.
type collision struct {
	winner Key
	losers []Key
}

// State is the deterministic core of the source: the latest Service and
// EndpointSlices of every service, the node's addresses, and what was last
// applied per frontend. Events mark services dirty; Pending gives the
// minimal change that makes the target equal their translation; Commit
// records what the target did with it. It does no I/O, reads no clock and
// is not safe for concurrent use: one goroutine owns it.
type State struct {
	nodeName  string
	nodeAddrs []netip.Addr

	// services and slices are the informers' cached objects (shared, not
	// copied); the slices of a service are sorted by name (most services
	// have one: a slice, not a map).
	services map[Key]*corev1.Service
	slices   map[Key][]*discoveryv1.EndpointSlice
	filed    map[objID]Key // the service each slice is filed under

	// desired is the last translation of each service, sorted by
	// frontend (as translate.Translate returns it). It is kept until the
	// service is marked dirty.
	desired map[Key][]*lb.Service
	// claims lists the services whose translation has a frontend.
	claims map[lb.L3n4Addr][]Key

	applied map[lb.L3n4Addr]applied
	byKey   map[Key][]lb.L3n4Addr // applied frontends per key, in no order

	dirtyKeys map[Key]struct{}         // translation to redo
	dirtyFE   map[lb.L3n4Addr]struct{} // desired and applied to compare

	refused    map[lb.L3n4Addr]refusal
	collisions map[lb.L3n4Addr]collision

	// triggers is, per service, the earliest trigger time of its changes
	// not yet programmed.
	triggers map[Key]time.Time

	// journals drained by the next Commit.
	names     []NameChange
	conflicts []Conflict

	// translations counts the calls of translate.Translate (for tests).
	translations int
}

// NewState returns an empty state for the node named nodeName (endpoints
// on it are node-local) with NodePort frontends on nodeAddrs.
func NewState(nodeName string, nodeAddrs []netip.Addr) *State {
	return &State{
		nodeName:   nodeName,
		nodeAddrs:  normAddrs(nodeAddrs),
		services:   map[Key]*corev1.Service{},
		slices:     map[Key][]*discoveryv1.EndpointSlice{},
		filed:      map[objID]Key{},
		desired:    map[Key][]*lb.Service{},
		claims:     map[lb.L3n4Addr][]Key{},
		applied:    map[lb.L3n4Addr]applied{},
		byKey:      map[Key][]lb.L3n4Addr{},
		dirtyKeys:  map[Key]struct{}{},
		dirtyFE:    map[lb.L3n4Addr]struct{}{},
		refused:    map[lb.L3n4Addr]refusal{},
		collisions: map[lb.L3n4Addr]collision{},
		triggers:   map[Key]time.Time{},
	}
}

// normAddrs returns the valid addresses of a, unmapped, without repeats,
// sorted (the order plays no part in the translation's output).
func normAddrs(a []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(a))
	for _, x := range a {
		if x.IsValid() {
			out = append(out, x.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// NodeAddresses returns the node addresses NodePort frontends get.
func (s *State) NodeAddresses() []netip.Addr { return slices.Clone(s.nodeAddrs) }

// markDirty makes key's translation be redone; a non-zero trigger is the
// time the change was made (the earliest one counts).
func (s *State) markDirty(k Key, trigger time.Time) {
	s.dirtyKeys[k] = struct{}{}
	if trigger.IsZero() {
		return
	}
	if t, ok := s.triggers[k]; !ok || trigger.Before(t) {
		s.triggers[k] = trigger
	}
}

// UpsertService records the latest version of a service (added or
// updated). A version that differs in nothing the translation reads
// changes nothing. trigger is when the change was made (zero: unknown).
func (s *State) UpsertService(svc *corev1.Service, trigger time.Time) {
	if svc == nil {
		return
	}
	k := Key{svc.Namespace, svc.Name}
	prev := s.services[k]
	s.services[k] = svc
	if prev != nil && sameService(prev, svc) {
		return
	}
	s.markDirty(k, trigger)
}

func sameService(a, b *corev1.Service) bool {
	if a.ResourceVersion != "" && a.ResourceVersion == b.ResourceVersion && a.UID == b.UID {
		return true
	}
	return a.UID == b.UID && a.CreationTimestamp.Equal(&b.CreationTimestamp) &&
		equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		equality.Semantic.DeepEqual(a.Spec, b.Spec) &&
		equality.Semantic.DeepEqual(a.Status.LoadBalancer, b.Status.LoadBalancer)
}

// DeleteService forgets the service k; its slices are kept (they may
// belong to a service of the same name created later).
func (s *State) DeleteService(k Key, trigger time.Time) {
	if _, ok := s.services[k]; !ok {
		return
	}
	delete(s.services, k)
	s.markDirty(k, trigger)
}

// UpsertSlice records the latest version of an EndpointSlice. It is filed
// under the service its label kubernetes.io/service-name names (a slice
// relabelled moves; one without the label is filed nowhere), whether that
// service exists yet or not.
func (s *State) UpsertSlice(es *discoveryv1.EndpointSlice, trigger time.Time) {
	if es == nil {
		return
	}
	id := objID{es.Namespace, es.Name}
	owner, labelled := es.Labels[discoveryv1.LabelServiceName]
	k := Key{es.Namespace, owner}
	old, had := s.filed[id]
	if had && (!labelled || old != k) {
		s.unfile(id, old, trigger)
		had = false
	}
	if !labelled || owner == "" {
		return
	}
	list := s.slices[k]
	var prev *discoveryv1.EndpointSlice
	if i, found := slices.BinarySearchFunc(list, es.Name, bySliceName); found {
		prev, list[i] = list[i], es
	} else {
		s.slices[k] = slices.Insert(list, i, es)
	}
	s.filed[id] = k
	if had && prev != nil && sameSlice(prev, es) {
		return
	}
	s.markDirty(k, trigger)
}

func bySliceName(es *discoveryv1.EndpointSlice, name string) int { return cmp.Compare(es.Name, name) }

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	if a.ResourceVersion != "" && a.ResourceVersion == b.ResourceVersion && a.UID == b.UID {
		return true
	}
	return a.AddressType == b.AddressType &&
		equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		equality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) &&
		equality.Semantic.DeepEqual(a.Ports, b.Ports)
}

func (s *State) unfile(id objID, k Key, trigger time.Time) {
	delete(s.filed, id)
	list := s.slices[k]
	if i, found := slices.BinarySearchFunc(list, id.name, bySliceName); found {
		list = slices.Delete(list, i, i+1)
		if len(list) == 0 {
			delete(s.slices, k)
		} else {
			s.slices[k] = list
		}
	}
	s.markDirty(k, trigger)
}

// DeleteSlice forgets the EndpointSlice namespace/name.
func (s *State) DeleteSlice(namespace, name string, trigger time.Time) {
	id := objID{namespace, name}
	if k, ok := s.filed[id]; ok {
		s.unfile(id, k, trigger)
	}
}

// SetNodeAddresses changes the node addresses NodePort frontends get;
// every service with a node port is translated again when they changed.
func (s *State) SetNodeAddresses(addrs []netip.Addr) {
	addrs = normAddrs(addrs)
	if slices.Equal(addrs, s.nodeAddrs) {
		return
	}
	s.nodeAddrs = addrs
	for k, svc := range s.services {
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				s.markDirty(k, time.Time{})
				break
			}
		}
	}
}

// Resync makes every refused frontend be tried again at the next Pending.
func (s *State) Resync() {
	for fe := range s.refused {
		s.dirtyFE[fe] = struct{}{}
	}
}

// Prepare translates up to n of the services changed since they were
// last translated (all of them when n <= 0) and reports whether some are
// left. It applies nothing and changes nothing Pending, Desired or Commit
// return: each translation is kept until the service's objects (or the
// node addresses, for a service with a node port) change, so that a later
// Pending or Desired translates only what changed since. The runner calls
// it while the informers' initial lists arrive, before it may apply
// anything. Which services a partial call takes is unspecified; the
// results do not depend on it.
func (s *State) Prepare(n int) bool {
	if n <= 0 || len(s.dirtyKeys) <= n {
		s.fold()
		return false
	}
	batch := make([]Key, 0, n)
	for k := range s.dirtyKeys {
		if len(batch) == n {
			break
		}
		batch = append(batch, k)
	}
	slices.SortFunc(batch, compareKeys)
	s.translateAll(batch)
	for _, k := range batch {
		delete(s.dirtyKeys, k)
	}
	return len(s.dirtyKeys) > 0
}

// fold redoes the translation of every dirty service.
func (s *State) fold() {
	if len(s.dirtyKeys) == 0 {
		return
	}
	s.translateAll(slices.SortedFunc(maps.Keys(s.dirtyKeys), compareKeys))
	clear(s.dirtyKeys)
}

// parallelMin is the number of services from which translateAll spreads
// the translations over the CPUs.
const parallelMin = 512

// translateAll redoes the translation of the services keys, in order.
// Many (the full list at the sync) are translated in parallel: Translate
// is a pure function of objects nothing writes meanwhile (the maps are
// only read), and the results are recorded in the order of keys, so the
// outcome is the same as one by one.
func (s *State) translateAll(keys []Key) {
	workers := min(runtime.GOMAXPROCS(0), len(keys)/(parallelMin/2))
	if workers < 2 {
		for _, k := range keys {
			s.record(k, s.translation(k))
		}
		return
	}
	if len(s.desired) == 0 && len(s.claims) == 0 && len(s.dirtyFE) == 0 {
		// The first translation of a whole cluster: the maps it fills
		// get their size at once rather than grown by doubling.
		s.desired = make(map[Key][]*lb.Service, len(keys))
		s.claims = make(map[lb.L3n4Addr][]Key, len(keys))
		s.dirtyFE = make(map[lb.L3n4Addr]struct{}, len(keys))
	}
	outs := make([][]*lb.Service, len(keys))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				outs[i] = s.translation(keys[i])
			}
		})
	}
	wg.Wait()
	for i, k := range keys {
		s.record(k, outs[i])
	}
}

// translation returns the translation of service k, sorted by frontend.
// It only reads the state.
func (s *State) translation(k Key) []*lb.Service {
	svc := s.services[k]
	if svc == nil {
		return nil
	}
	// Translate reads the slices (sorted by name) and keeps none of them;
	// its services are sorted by frontend, one per frontend.
	in := translate.Input{Service: svc, Slices: s.slices[k], NodeName: s.nodeName, NodeAddresses: s.nodeAddrs}
	next := slices.Clip(translate.Translate(in).Services)
	for _, x := range next {
		x.Source = lb.SourceKubernetes
	}
	return next
}

// record makes next the translation of service k.
func (s *State) record(k Key, next []*lb.Service) {
	if s.services[k] != nil {
		s.translations++
	}
	prev := s.desired[k]
	for _, old := range prev {
		if fe := old.Frontend.L3n4Addr; findFrontend(next, fe) == nil {
			s.unclaim(fe, k)
			s.dirtyFE[fe] = struct{}{}
		}
	}
	for _, x := range next {
		fe := x.Frontend.L3n4Addr
		old := findFrontend(prev, fe)
		had := old != nil
		if !had {
			s.claims[fe] = append(s.claims[fe], k)
		}
		// The service's objects changed: a refused frontend is tried
		// again even if its translation is the same, and a contested one
		// resolved again (the service may have been re-created, younger).
		if !had || !equalService(old, x) || s.refused[fe].key == k || len(s.claims[fe]) > 1 {
			s.dirtyFE[fe] = struct{}{}
		}
	}
	if len(next) == 0 {
		delete(s.desired, k)
	} else {
		s.desired[k] = next
	}
}

// findFrontend returns the service on fe in ss (sorted by frontend), or
// nil.
func findFrontend(ss []*lb.Service, fe lb.L3n4Addr) *lb.Service {
	i, found := slices.BinarySearchFunc(ss, fe, func(x *lb.Service, fe lb.L3n4Addr) int { return x.Frontend.L3n4Addr.Compare(fe) })
	if !found {
		return nil
	}
	return ss[i]
}

func (s *State) unclaim(fe lb.L3n4Addr, k Key) {
	c := slices.DeleteFunc(s.claims[fe], func(x Key) bool { return x == k })
	if len(c) == 0 {
		delete(s.claims, fe)
	} else {
		s.claims[fe] = c
	}
}

// older reports whether the service of a wins a frontend against b's: the
// oldest creationTimestamp, then the smaller namespace/name.
func (s *State) older(a, b Key) bool {
	ta, tb := s.services[a].CreationTimestamp.Time, s.services[b].CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return compareKeys(a, b) < 0
}

// want returns the service that should hold fe, and whose it is.
func (s *State) want(fe lb.L3n4Addr) (*lb.Service, Key, bool) {
	c := s.claims[fe]
	if len(c) == 0 {
		delete(s.collisions, fe)
		return nil, Key{}, false
	}
	w := c[0]
	for _, k := range c[1:] {
		if s.older(k, w) {
			w = k
		}
	}
	if len(c) == 1 {
		delete(s.collisions, fe)
	} else {
		losers := make([]Key, 0, len(c)-1)
		for _, k := range c {
			if k != w {
				losers = append(losers, k)
			}
		}
		slices.SortFunc(losers, compareKeys)
		old := s.collisions[fe]
		for _, k := range losers {
			if old.winner != w || !slices.Contains(old.losers, k) {
				s.conflicts = append(s.conflicts, Conflict{Frontend: fe, Service: k.String(), Reason: collisionReason(w)})
			}
		}
		s.collisions[fe] = collision{winner: w, losers: losers}
	}
	return findFrontend(s.desired[w], fe), w, true
}

func collisionReason(winner Key) string {
	return "frontend held by Kubernetes service " + winner.String() + " (older, or same age and first by name)"
}

// Change is the minimal change that makes the target equal the desired
// state: services to upsert and frontends to delete, each sorted by
// frontend.
type Change struct {
	Upserts []*lb.Service
	Deletes []lb.L3n4Addr
}

// Empty reports whether c changes nothing.
func (c Change) Empty() bool { return len(c.Upserts) == 0 && len(c.Deletes) == 0 }

// Pending translates the dirty services again and returns what differs
// from what was last applied: new or changed services to upsert, gone
// frontends to delete. Calling it again before Commit returns the same.
func (s *State) Pending() Change {
	s.fold()
	var c Change
	for _, fe := range slices.SortedFunc(maps.Keys(s.dirtyFE), lb.L3n4Addr.Compare) {
		want, w, ok := s.want(fe)
		have, has := s.applied[fe]
		switch {
		case !ok && !has:
			delete(s.dirtyFE, fe)
			delete(s.refused, fe)
		case !ok:
			c.Deletes = append(c.Deletes, fe)
		case has && have.svc != nil && equalService(have.svc, want):
			if have.key != w {
				s.setApplied(fe, applied{key: w, svc: have.svc})
			}
			delete(s.dirtyFE, fe)
			delete(s.refused, fe)
		default:
			c.Upserts = append(c.Upserts, want)
		}
	}
	return c
}

// Desired returns every service the target should hold: the translation
// of every service, one per frontend (collisions resolved), sorted by
// frontend. It is what the full reconciliation (SyncSource) takes.
func (s *State) Desired() []*lb.Service {
	s.fold()
	out := make([]*lb.Service, 0, len(s.claims))
	for _, fe := range slices.SortedFunc(maps.Keys(s.claims), lb.L3n4Addr.Compare) {
		if x, _, ok := s.want(fe); ok {
			out = append(out, x)
		}
	}
	return out
}

func (s *State) setApplied(fe lb.L3n4Addr, a applied) {
	if old, ok := s.applied[fe]; ok {
		if old.key == a.key {
			s.applied[fe] = a
			return
		}
		s.dropApplied(fe)
	}
	s.applied[fe] = a
	s.byKey[a.key] = append(s.byKey[a.key], fe)
	s.names = append(s.names, NameChange{Frontend: fe, Name: a.key.String()})
}

func (s *State) dropApplied(fe lb.L3n4Addr) {
	old, ok := s.applied[fe]
	if !ok {
		return
	}
	delete(s.applied, fe)
	list := s.byKey[old.key]
	if i := slices.Index(list, fe); i >= 0 {
		list[i] = list[len(list)-1]
		list = list[:len(list)-1]
		if len(list) == 0 {
			delete(s.byKey, old.key)
		} else {
			s.byKey[old.key] = list
		}
	}
	s.names = append(s.names, NameChange{Frontend: fe})
}

// Round is what the target did with a Change: the results of
// DeleteBatchAs and UpsertBatch for its deletes and upserts, in order, or
// the error of a call that failed as a whole (its results are ignored:
// whatever it did is unknown).
type Round struct {
	Change        Change
	DeleteResults []actorlb.DeleteResult
	DeleteErr     error
	UpsertResults []actorlb.UpsertResult
	UpsertErr     error
}

// Report says what a Commit changed, for the runner's logs, metrics and
// status.
type Report struct {
	// Failed counts the frontends whose change failed in a way worth
	// retrying: they stay pending.
	Failed int
	// FirstError is the first of those failures.
	FirstError error
	// Triggers are the trigger times of the services whose changes are
	// now all programmed (network programming latency).
	Triggers []time.Time
	// NewConflicts are conflicts not reported before (log them once).
	NewConflicts []Conflict
	// Names are the changes of which service owns a frontend, in order.
	Names []NameChange
}

// NameChange says that Frontend now belongs to the Kubernetes service Name
// ("namespace/name"), or to none when Name is empty.
type NameChange struct {
	Frontend lb.L3n4Addr
	Name     string
}

// Conflict is a frontend of a Kubernetes service that the source cannot
// program: another Kubernetes service or another source holds it.
type Conflict struct {
	Frontend lb.L3n4Addr
	// Service is the service that does not get the frontend.
	Service string
	Reason  string
}

// Commit records the outcome of applying r.Change and returns what
// changed. A frontend whose write failed stays pending (Pending returns it
// again); one the target refused for good (actorlb.ErrFrontendOwned, an invalid
// service) is a conflict, tried again only when its service's objects
// change or at Resync.
func (s *State) Commit(r Round) Report {
	var rep Report
	fail := func(fe lb.L3n4Addr, err error) {
		rep.Failed++
		if rep.FirstError == nil {
			rep.FirstError = err
		}
	}
	for i, fe := range r.Change.Deletes {
		err := r.DeleteErr
		if err == nil {
			if i >= len(r.DeleteResults) {
				err = errMissingResult
			} else {
				err = r.DeleteResults[i].Err
			}
		}
		switch {
		case err == nil, errors.Is(err, actorlb.ErrServiceNotFound), errors.Is(err, actorlb.ErrFrontendOwned):
			s.dropApplied(fe)
			delete(s.dirtyFE, fe)
			delete(s.refused, fe)
		case r.DeleteErr != nil:
			s.unknown(fe)
			fail(fe, err)
		default:
			fail(fe, err)
		}
	}
	for i, svc := range r.Change.Upserts {
		fe := svc.Frontend.L3n4Addr
		err := r.UpsertErr
		if err == nil {
			if i >= len(r.UpsertResults) {
				err = errMissingResult
			} else {
				err = r.UpsertResults[i].Err
			}
		}
		s.upserted(fe, svc, err, r.UpsertErr != nil, fail)
	}
	s.settle(&rep)
	return rep
}

// upserted records the outcome err of upserting svc; callErr says the
// whole call failed (the outcome is unknown).
func (s *State) upserted(fe lb.L3n4Addr, svc *lb.Service, err error, callErr bool, fail func(lb.L3n4Addr, error)) {
	_, w, ok := s.want(fe)
	var ve *lb.ValidationError
	switch {
	case err == nil:
		if ok {
			s.setApplied(fe, applied{key: w, svc: svc})
		}
		delete(s.dirtyFE, fe)
		delete(s.refused, fe)
	case errors.Is(err, actorlb.ErrFrontendOwned):
		s.dropApplied(fe)
		s.refuse(fe, w, "another source owns the frontend: "+err.Error())
	case errors.As(err, &ve):
		s.refuse(fe, w, "the engine refused the service: "+err.Error())
	case callErr:
		s.unknown(fe)
		fail(fe, err)
	default:
		fail(fe, err)
	}
}

// unknown records that the target may or may not hold a service on fe.
func (s *State) unknown(fe lb.L3n4Addr) {
	a := s.applied[fe]
	if _, has := s.applied[fe]; !has {
		_, w, _ := s.want(fe)
		a.key = w
	}
	a.svc = nil
	s.setApplied(fe, a)
}

func (s *State) refuse(fe lb.L3n4Addr, k Key, reason string) {
	delete(s.dirtyFE, fe)
	if old, ok := s.refused[fe]; !ok || old.key != k {
		s.conflicts = append(s.conflicts, Conflict{Frontend: fe, Service: k.String(), Reason: reason})
	}
	s.refused[fe] = refusal{key: k, reason: reason}
}

var errMissingResult = errors.New("the target returned no result for this frontend")

// CommitFull records the outcome of the full reconciliation of desired
// (as Desired returned it): the target now holds exactly desired, except
// the frontends of failed.
func (s *State) CommitFull(desired []*lb.Service, failed []actorlb.SyncFailure) Report {
	var rep Report
	bad := make(map[lb.L3n4Addr]error, len(failed))
	for _, f := range failed {
		bad[f.Frontend] = f.Err
	}
	for fe := range s.applied {
		s.dropApplied(fe)
	}
	clear(s.dirtyFE)
	for _, svc := range desired {
		fe := svc.Frontend.L3n4Addr
		err, isBad := bad[fe]
		if isBad && err == nil {
			err = errors.New("failed without a reason")
		}
		if isBad && !errors.Is(err, actorlb.ErrFrontendOwned) {
			s.unknown(fe) // the restored version may still be there
		}
		s.upserted(fe, svc, err, false, func(fe lb.L3n4Addr, err error) {
			s.dirtyFE[fe] = struct{}{}
			rep.Failed++
			if rep.FirstError == nil {
				rep.FirstError = err
			}
		})
	}
	s.settle(&rep)
	return rep
}

// settle completes the report: triggers of services with nothing left
// pending, the journals.
func (s *State) settle(rep *Report) {
	for k, t := range s.triggers {
		if s.pendingFor(k) {
			continue
		}
		rep.Triggers = append(rep.Triggers, t)
		delete(s.triggers, k)
	}
	slices.SortFunc(rep.Triggers, func(a, b time.Time) int { return a.Compare(b) })
	rep.NewConflicts, s.conflicts = s.conflicts, nil
	rep.Names, s.names = s.names, nil
}

// pendingFor reports whether a change of service k is still to be
// programmed.
func (s *State) pendingFor(k Key) bool {
	if _, ok := s.dirtyKeys[k]; ok {
		return true
	}
	for _, x := range s.desired[k] {
		if _, ok := s.dirtyFE[x.Frontend.L3n4Addr]; ok {
			return true
		}
	}
	for _, fe := range s.byKey[k] {
		if _, ok := s.dirtyFE[fe]; ok {
			return true
		}
	}
	return false
}

// Name returns the Kubernetes service ("namespace/name") whose translation
// the target holds on fe.
func (s *State) Name(fe lb.L3n4Addr) (string, bool) {
	a, ok := s.applied[fe]
	if !ok {
		return "", false
	}
	return a.key.String(), true
}

// Counts are the state's figures for the status.
type Counts struct {
	// Services is the number of Kubernetes services with at least one
	// frontend applied, Frontends the number of frontends applied.
	Services, Frontends int
	// Pending is the number of frontends still to apply.
	Pending int
}

// Counts returns the state's figures.
func (s *State) Counts() Counts {
	return Counts{Services: len(s.byKey), Frontends: len(s.applied), Pending: len(s.dirtyFE) + len(s.dirtyKeys)}
}

// Conflicts returns the current conflicts, sorted by frontend then
// service.
func (s *State) Conflicts() []Conflict {
	var out []Conflict
	for fe, r := range s.refused {
		out = append(out, Conflict{Frontend: fe, Service: r.key.String(), Reason: r.reason})
	}
	for fe, c := range s.collisions {
		for _, k := range c.losers {
			out = append(out, Conflict{Frontend: fe, Service: k.String(), Reason: collisionReason(c.winner)})
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int {
		return cmp.Or(a.Frontend.Compare(b.Frontend), cmp.Compare(a.Service, b.Service))
	})
	return out
}

// equalService reports whether a and b program the same thing: frontend,
// type, flags, source and backends (in order; the translation sorts them).
func equalService(a, b *lb.Service) bool {
	return a.Frontend == b.Frontend && a.Type == b.Type &&
		a.ExtTrafficPolicyLocal == b.ExtTrafficPolicyLocal &&
		a.IntTrafficPolicyLocal == b.IntTrafficPolicyLocal &&
		a.SessionAffinity == b.SessionAffinity &&
		a.SessionAffinityTimeout == b.SessionAffinityTimeout &&
		a.LBAlgorithm == b.LBAlgorithm && a.Source == b.Source &&
		slices.Equal(a.Backends, b.Backends)
}

// Idle reports whether nothing is left to apply.
func (c Counts) Idle() bool { return c.Pending == 0 }
