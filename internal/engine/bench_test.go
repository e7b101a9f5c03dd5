package engine

import (
	"fmt"
	"io"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/sirupsen/logrus"
)

// autoChildren answers every request the core sends as a healthy child
// would, handing out fresh IDs, so that a benchmark measures the core
// alone (no actors, no maps).
type autoChildren struct {
	c      *Core
	nextID uint32
}

func (a *autoChildren) answer(r messages.Request) any {
	switch m := r.(type) {
	case *messages.AllocAcquire:
		rep := &messages.AllocAcquired{ReqID: r.RequestID(), BackendIDs: make([]lb.BackendID, len(m.Backends))}
		if m.Service {
			a.nextID++
			rep.ServiceID = lb.ServiceID(a.nextID)
		}
		for i := range rep.BackendIDs {
			a.nextID++
			rep.BackendIDs[i] = lb.BackendID(a.nextID)
		}
		return rep
	case *messages.AllocRelease:
		return &messages.AllocReleased{ReqID: r.RequestID()}
	}
	return ok()(r)
}

// settle runs the core until nothing is left to send.
func (a *autoChildren) settle() {
	for a.c.HasReady() {
		rd := a.c.Ready()
		var replies []any
		for _, out := range rd.Requests {
			messages.EachRequest(out.Msg, func(m any) {
				r := m.(messages.Request)
				if _, dump := r.(*messages.MapDump); dump {
					replies = append(replies, dumpEmpty(out.Child, r))
					return
				}
				replies = append(replies, a.answer(r))
			})
		}
		a.c.Advance()
		for _, r := range replies {
			a.c.Step(r)
		}
		for _, an := range a.c.Answers() {
			an.Call.Answer(an.Reply)
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
		return &messages.MapDumped[maps.MemberEntry]{ReqID: r.RequestID()}
	case ChildAffinity:
		return &messages.MapDumped[maps.AffinityMatchKey]{ReqID: r.RequestID()}
	case ChildSourceRange:
		return &messages.MapDumped[maps.SourceRangeKey]{ReqID: r.RequestID()}
	}
	return dumpedBackends()(r)
}

// BenchmarkCoreUpsertDelete10Backends measures the core's own cost
// (CPU and allocations) of creating and deleting one service with ten
// backends, every child answering at once.
func BenchmarkCoreUpsertDelete10Backends(b *testing.B) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	c := New(Config{Log: logrus.NewEntry(log), Restore: true, Now: time.Now})
	a := &autoChildren{c: c}
	c.Step(Start{})
	a.settle()
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
	up := &messages.Upsert{Service: s, Reply: upReply}
	del := &messages.DeleteByFrontend{Frontend: fe, Reply: delReply}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c.Step(up)
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
