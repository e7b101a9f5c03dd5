package engine

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/benchset"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	lbmaps "github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/sirupsen/logrus"
)

// autoChildren answers every request the core sends as a healthy child
// would, handing out fresh IDs, so that a benchmark measures the core
// alone (no actors, no maps).
type autoChildren struct {
	c      *Core
	nextID uint32
	// sent, if set, sees every request before it is answered.
	sent func(messages.Request)
	// answered, if set, sees every answer before the core is stepped
	// with it.
	answered func(any)
}

func (a *autoChildren) answer(r messages.Request) any {
	switch m := r.(type) {
	case *messages.AllocAcquire:
		// As the allocator: in the arrays of the answer handed back, if
		// any (taken from the request).
		rep := m.Reuse
		m.Reuse = nil
		if rep == nil {
			rep = &messages.AllocAcquired{}
		}
		rep.ReqID = r.RequestID()
		rep.Items = slices.Grow(rep.Items[:0], len(m.Items))[:len(m.Items)]
		for i, it := range m.Items {
			got := &rep.Items[i]
			*got = messages.AcquiredItem{BackendIDs: make([]lb.BackendID, len(it.Backends))}
			if it.Service {
				a.nextID++
				got.ServiceID = lb.ServiceID(a.nextID)
			}
			for j := range got.BackendIDs {
				a.nextID++
				got.BackendIDs[j] = lb.BackendID(a.nextID)
			}
		}
		return rep
	case *messages.AllocRelease:
		return &messages.AllocReleased{ReqID: r.RequestID()}
	}
	return ok()(r)
}

// startedCore returns a core that has restored from empty maps, its
// children answered by an autoChildren.
func startedCore() (*Core, *autoChildren) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	c := New(Config{Log: logrus.NewEntry(log), Restore: true, Now: time.Now})
	a := &autoChildren{c: c}
	c.Step(Start{})
	a.settle()
	return c, a
}

// settle runs the core until nothing is left to send or to take in,
// delivering its answers as they come (also those of calls it answered
// at once, sending nothing). As the supervisor does, it steps TakeIn while
// a chunk of a call being taken in is due, after the replies that came
// meanwhile.
func (a *autoChildren) settle() {
	for {
		for _, an := range a.c.Answers() {
			an.Call.Answer(an.Reply)
		}
		if a.c.HasIntake() {
			a.c.Step(TakeIn{})
			continue
		}
		if !a.c.HasReady() {
			return
		}
		rd := a.c.Ready()
		var replies []any
		for _, out := range rd.Requests {
			messages.EachRequest(out.Msg, func(m any) {
				r := m.(messages.Request)
				if a.sent != nil {
					a.sent(r)
				}
				if _, dump := r.(*messages.MapDump); dump {
					replies = append(replies, dumpEmpty(out.Child, r))
					return
				}
				reply := a.answer(r)
				if a.answered != nil {
					a.answered(reply)
				}
				replies = append(replies, reply)
			})
		}
		a.c.Advance()
		for _, r := range replies {
			a.c.Step(r)
		}
	}
}

func dumpEmpty(child string, r messages.Request) any {
	switch child {
	case ChildRevNAT:
		return &messages.RevNATDumped{ReqID: r.RequestID()}
	case ChildService4, ChildService6:
		return dumpedServices()(r)
	case ChildMembers:
		return &messages.MapDumped[lbmaps.MemberEntry]{ReqID: r.RequestID()}
	case ChildAffinity:
		return &messages.MapDumped[lbmaps.AffinityMatchKey]{ReqID: r.RequestID()}
	case ChildSourceRange:
		return &messages.MapDumped[lbmaps.SourceRangeKey]{ReqID: r.RequestID()}
	}
	return dumpedBackends()(r)
}

// BenchmarkCoreUpsertDelete10Backends measures the core's own cost
// (CPU and allocations) of creating and deleting one service with ten
// backends, every child answering at once.
func BenchmarkCoreUpsertDelete10Backends(b *testing.B) {
	c, a := startedCore()
	fe, _ := lb.ParseL3n4Addr("10.96.0.1:80/TCP")
	s := &lb.Service{Frontend: lb.Frontend{L3n4Addr: fe}}
	for i := range 10 {
		be, err := lb.ParseBackend(fmt.Sprintf("10.0.1.%d:8080/TCP", i+1))
		if err != nil {
			b.Fatal(err)
		}
		s.Backends = append(s.Backends, be)
	}
	upReply, delReply := make(chan messages.UpsertReply, 1), make(chan messages.DeleteReply, 1)
	del := &messages.DeleteByFrontend{Frontend: fe, Reply: delReply}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		// An Upsert is taken once (Take): each call is a message of its
		// own, as the façade sends.
		c.Step(&messages.Upsert{Service: s, Reply: upReply})
		a.settle()
		if r := <-upReply; r.Err != nil {
			b.Fatal(r.Err)
		}
		c.Step(del)
		a.settle()
		if r := <-delReply; r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

// BenchmarkCoreUpsertBatch10kx10 measures the core's own cost of the
// bench's batched bulk: 10,000 new services of ten backends each into an
// empty core, in UpsertBatch calls of 100 services, eight calls stepped
// before the children answer (as eight callers would keep them in flight),
// every child answering at once. Reported per service.
func BenchmarkCoreUpsertBatch10kx10(b *testing.B) {
	benchCoreUpsertBatch(b, benchset.Sequential(10000, 10), 100)
}

// benchCoreUpsertBatch upserts svcs into an empty core in UpsertBatch
// calls of per services (stepInFlight), and reports the time per service.
func benchCoreUpsertBatch(b *testing.B, svcs []*lb.Service, per int) {
	b.Helper()
	n := len(svcs)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c, a := startedCore()
		// The core puts each service's backends into slot order in place,
		// as the façade's copy lets it: each round gets a copy of its own,
		// so that every round sorts backends that come in no order.
		in := make([]*lb.Service, n)
		for i, s := range svcs {
			in[i] = s.DeepCopy()
		}
		b.StartTimer()
		replies := stepInFlight(c, a, n, per, func(lo, hi int, r chan messages.UpsertBatchReply) any {
			return &messages.UpsertBatch{Services: in[lo:hi], Reply: r}
		})
		for _, r := range replies {
			for _, res := range (<-r).Results {
				if res.Err != nil {
					b.Fatal(res.Err)
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/service")
}

// stepInFlight steps the calls call makes for items [lo, hi) of n, per
// items each, eight of them before the children answer (as eight callers
// would keep them in flight), and the children answer every one at once;
// it returns the calls' reply channels in order.
func stepInFlight[R any](c *Core, a *autoChildren, n, per int, call func(lo, hi int, reply chan R) any) []chan R {
	const inFlight = 8
	var replies []chan R
	for lo := 0; lo < n; lo += per {
		r := make(chan R, 1)
		replies = append(replies, r)
		c.Step(call(lo, min(lo+per, n), r))
		if len(replies)%inFlight == 0 {
			a.settle()
		}
	}
	a.settle()
	return replies
}

// BenchmarkCoreUpsertBatch10kx10Spread is BenchmarkCoreUpsertBatch10kx10
// with addresses as a cluster spreads them: frontends drawn at random from
// a /16, and each service's ten backends pods on ten nodes of 200 drawn at
// random (each node gives out its /24 in order), so that a service's
// backends are not a run of addresses (pagedindex and the queue table
// keep runs in pages).
func BenchmarkCoreUpsertBatch10kx10Spread(b *testing.B) {
	benchCoreUpsertBatch(b, benchset.Spread(10000, 10), 100)
}

// BenchmarkCoreUpsertBatch50kx1 is the core's side of the bench's
// insert-50k-x1: 50,000 new services of one backend each into an empty
// core, in UpsertBatch calls of 1,000 services, eight calls stepped
// before the children answer, every child answering at once. Reported
// per service: what a service costs the core beyond its backends.
func BenchmarkCoreUpsertBatch50kx1(b *testing.B) {
	benchCoreUpsertBatch(b, benchset.Sequential(50000, 1), 1000)
}

// BenchmarkInstall10kx10 is the install of a warm restart of the bench's
// restore: 10,000 restored services of ten IPv4 backends each (sequential
// IDs, as the allocator hands them out) made the table and backend index
// of an empty core, taking over the table's IPv4 keys.
func BenchmarkInstall10kx10(b *testing.B) {
	const n, k = 10000, 10
	svcs := make([]*table.Service, n)
	for i, spec := range benchset.Sequential(n, k) {
		spec.Frontend.ID = lb.ServiceID(i + 1)
		s := &table.Service{Spec: *spec}
		for j := range k {
			s.BackendIDs = append(s.BackendIDs, lb.BackendID(i*k+j+1))
		}
		svcs[i] = s
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c := New(Config{})
		r := &table.Restored{Services: svcs}
		b.StartTimer()
		(&repairPlan{restored: r}).install(c, nil)
	}
}

// BenchmarkCoreUpdateBatch10kx10 measures the core's own cost of an
// endpoint change on every service of the bench's bulk: 10,000 services of
// ten backends each, created first (not timed), then each updated with
// its last backend replaced by a new one (nine kept, one removed, one
// fresh), in UpsertBatch calls of 100 services, eight calls stepped
// before the children answer, every child answering at once. Reported
// per service.
func BenchmarkCoreUpdateBatch10kx10(b *testing.B) {
	const per = 100
	svcs := benchset.Sequential(10000, 10)
	updated := make([]*lb.Service, len(svcs))
	for i, s := range svcs {
		u := s.DeepCopy()
		x := len(svcs)*10 + i // clear of every backend of svcs
		u.Backends[len(u.Backends)-1].L3n4Addr = lb.L3n4Addr{
			Addr: netip.AddrFrom4([4]byte{10, byte(1 + x>>16), byte(x >> 8), byte(x)}), Port: 8080, Protocol: lb.TCP,
		}
		updated[i] = u
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c, a := coreHolding(b, svcs)
		ups := make([]*lb.Service, len(updated)) // the core keeps what it is sent
		for i, u := range updated {
			ups[i] = u.DeepCopy()
		}
		b.StartTimer()
		replies := stepInFlight(c, a, len(ups), per, func(lo, hi int, r chan messages.UpsertBatchReply) any {
			return &messages.UpsertBatch{Services: ups[lo:hi], Reply: r}
		})
		for _, r := range replies {
			for _, res := range (<-r).Results {
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				if res.Created {
					b.Fatal("an update created a service")
				}
			}
		}
		if c.services.len() != len(svcs) || c.users.Len() != 10*len(svcs) {
			b.Fatalf("%d services and %d backends, want %d and %d", c.services.len(), c.users.Len(), len(svcs), 10*len(svcs))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(svcs)), "ns/service")
}

// coreHolding returns a started core (its children answering at once)
// holding svcs, upserted in one UpsertBatch.
func coreHolding(b *testing.B, svcs []*lb.Service) (*Core, *autoChildren) {
	b.Helper()
	c, a := startedCore()
	r := make(chan messages.UpsertBatchReply, 1)
	c.Step(&messages.UpsertBatch{Services: svcs, Reply: r})
	a.settle()
	for _, res := range (<-r).Results {
		if res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	return c, a
}

// BenchmarkCoreDeleteBatch10kx10 measures the core's own cost of
// deleting the bench's bulk: 10,000 services of ten backends each,
// created first (not timed), then deleted in DeleteBatch calls of 100
// frontends, eight calls stepped before the children answer, every child
// answering at once. Reported per service.
func BenchmarkCoreDeleteBatch10kx10(b *testing.B) {
	const per = 100
	svcs := benchset.Sequential(10000, 10)
	fes := make([]lb.L3n4Addr, len(svcs))
	for i, s := range svcs {
		fes[i] = s.Frontend.L3n4Addr
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c, a := coreHolding(b, svcs)
		b.StartTimer()
		replies := stepInFlight(c, a, len(fes), per, func(lo, hi int, r chan messages.DeleteBatchReply) any {
			return &messages.DeleteBatch{Frontends: fes[lo:hi], Reply: r}
		})
		for _, r := range replies {
			for _, res := range (<-r).Results {
				if res.Err != nil {
					b.Fatal(res.Err)
				}
			}
		}
		if c.services.len() != 0 || c.users.Len() != 0 {
			b.Fatalf("%d services and %d backends left", c.services.len(), c.users.Len())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(svcs)), "ns/service")
}
