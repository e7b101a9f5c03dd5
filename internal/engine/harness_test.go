package engine

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/maglev"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// harness drives a Core as its actor would, with the test playing every
// child: each request the core sends is printed as one line, and the test
// answers it. Scripts read as protocol stories:
//
//	h.call(upsert(...))
//	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP]")
//	h.reply("alloc", acquired(1, 1))
type harness struct {
	t    *testing.T
	c    *Core
	sent map[string][]messages.Request // per child, oldest first: requests sent and not yet answered
	// answered collects the answers to calls, printed.
	answered []string
	events   []string // OnUp, OnDown, OnRestoreFailed
	// maglevLog is every request the Maglev owner got, printed.
	maglevLog []string
	// clock is the core's clock: each reading adds a microsecond.
	clock time.Time
	// freshID is the next ID flushAnswering gives an acquire (0: 1000).
	freshID int
}

// newHarness returns a core restored from empty maps, serving.
func newHarness(t *testing.T, opts ...func(*Config)) *harness {
	t.Helper()
	h := newIdleHarness(t, opts...)
	h.step(Start{})
	h.dumpEmptyMaps()
	h.syncMaglev("maglev: sync []")
	h.expect("alloc: restore services [] backends []")
	h.reply("alloc", done())
	h.expectEvents("up")
	return h
}

// dumpEmptyMaps expects the restore's dump requests and answers each
// with an empty map.
func (h *harness) dumpEmptyMaps() {
	h.t.Helper()
	h.expect("svc4: dump", "svc6: dump", "be4: dump", "be6: dump", "revnat: dump", "members: dump", "affinity: dump", "srcrange: dump")
	h.reply("svc4", dumpedServices())
	h.reply("svc6", dumpedServices())
	h.reply("be4", dumpedBackends())
	h.reply("be6", dumpedBackends())
	h.reply("revnat", func(r messages.Request) any { return &messages.RevNATDumped{ReqID: r.RequestID()} })
	h.reply("members", func(r messages.Request) any { return &messages.MapDumped[maps.MemberEntry]{ReqID: r.RequestID()} })
	h.reply("affinity", func(r messages.Request) any { return &messages.MapDumped[maps.AffinityMatchKey]{ReqID: r.RequestID()} })
	h.reply("srcrange", func(r messages.Request) any { return &messages.MapDumped[maps.SourceRangeKey]{ReqID: r.RequestID()} })
}

// syncMaglev expects the restore's Maglev sync (want) and answers it.
func (h *harness) syncMaglev(want string) {
	h.t.Helper()
	h.expect(want)
	h.reply("maglev", ok())
}

// newIdleHarness returns a core that has not started; opts change its
// configuration.
func newIdleHarness(t *testing.T, opts ...func(*Config)) *harness {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	h := &harness{t: t, sent: map[string][]messages.Request{}, clock: time.Unix(0, 0)}
	cfg := Config{
		Log: logrus.NewEntry(log), Restore: true,
		Now:             func() time.Time { h.clock = h.clock.Add(time.Microsecond); return h.clock },
		OnUp:            func() { h.events = append(h.events, "up") },
		OnDown:          func() { h.events = append(h.events, "down") },
		OnRestoreFailed: func(err error) { h.events = append(h.events, "restore failed: "+err.Error()) },
		OnBackendsLeft: func(id lb.ServiceID, bs []lb.L3n4Addr) {
			h.events = append(h.events, fmt.Sprintf("backends left %d: %s", id, list(bs, lb.L3n4Addr.String)))
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.c = New(cfg)
	return h
}

// step feeds the core one input and collects the answers to calls.
func (h *harness) step(in Input) {
	h.t.Helper()
	h.c.Step(in)
	for _, a := range h.c.Answers() {
		h.answered = append(h.answered, printAnswer(a.Reply))
	}
	h.checkBehind()
}

// checkBehind fails unless the core's count of ops waiting behind another
// is what its queues hold (dequeue skips the lookups while it is 0).
func (h *harness) checkBehind() {
	h.t.Helper()
	n := 0
	for _, q := range h.c.queues.all {
		n += len(q.behind())
	}
	if h.c.behind != n {
		h.t.Fatalf("the core counts %d ops waiting behind another, its queues hold %d", h.c.behind, n)
	}
}

// call steps a call.
func (h *harness) call(m messages.Call) { h.t.Helper(); h.step(m) }

// expect flushes the outbox (as the actor does once its mailbox is
// drained) and checks the requests sent, in order, one line each.
func (h *harness) expect(want ...string) {
	h.t.Helper()
	got := h.flush()
	if want == nil {
		want = []string{}
	}
	require.Equal(h.t, want, got, "requests sent")
}

// flush flushes the outbox as expect does and returns the requests sent,
// one line each (never nil).
func (h *harness) flush() []string {
	got := []string{}
	for _, out := range h.c.Ready().Requests {
		messages.EachRequest(out.Msg, func(m any) {
			r := m.(messages.Request)
			h.sent[out.Child] = append(h.sent[out.Child], r)
			got = append(got, out.Child+": "+printRequest(r))
		})
	}
	h.c.Advance()
	return got
}

// reply answers the oldest unanswered request of child with r (built
// from the request, so that it carries its ID).
func (h *harness) reply(child string, r func(req messages.Request) any) {
	h.t.Helper()
	q := h.sent[child]
	require.NotEmpty(h.t, q, "no request of %s to answer", child)
	req := q[0]
	h.sent[child] = q[1:]
	if child == ChildMaglev {
		h.maglevLog = append(h.maglevLog, printRequest(req))
	}
	h.step(r(req))
}

// replyTo answers the oldest unanswered request of child whose printed
// form starts with prefix (a restarted allocator answers its snapshot
// before the requests queued ahead of it).
func (h *harness) replyTo(child, prefix string, r func(req messages.Request) any) {
	h.t.Helper()
	q := h.sent[child]
	for i, req := range q {
		if strings.HasPrefix(printRequest(req), prefix) {
			h.sent[child] = append(q[:i:i], q[i+1:]...)
			h.step(r(req))
			return
		}
	}
	h.t.Fatalf("no request of %s starting with %q to answer", child, prefix)
}

// lose forgets the oldest unanswered request of child (the child failed
// on it) and returns it.
func (h *harness) lose(child string) messages.Request {
	h.t.Helper()
	q := h.sent[child]
	require.NotEmpty(h.t, q, "no request of %s to lose", child)
	h.sent[child] = q[1:]
	return q[0]
}

// forget drops every unanswered request of child (it restarted and lost
// them).
func (h *harness) forget(child string) { h.sent[child] = nil }

// expectQueuesEmpty fails unless every op has left its queues.
func (h *harness) expectQueuesEmpty() {
	h.t.Helper()
	if got := h.c.queues.len(); got != 0 {
		h.t.Fatalf("%d queues left after every op completed", got)
	}
}

// expectAnswers checks the answers to calls since the last check.
func (h *harness) expectAnswers(want ...string) {
	h.t.Helper()
	got := h.answered
	h.answered = nil
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	require.Equal(h.t, want, got, "answers")
}

func (h *harness) expectEvents(want ...string) {
	h.t.Helper()
	require.Equal(h.t, want, h.events, "events")
	h.events = nil
}

// ---- Calls.

func svc(t *testing.T, fe string, backends ...string) *lb.Service {
	t.Helper()
	a, err := lb.ParseL3n4Addr(fe)
	require.NoError(t, err)
	s := &lb.Service{Frontend: lb.Frontend{L3n4Addr: a}}
	for _, b := range backends {
		be, err := lb.ParseBackend(b)
		require.NoError(t, err)
		s.Backends = append(s.Backends, be)
	}
	return s
}

// upsert is the message of an Upsert of s: of a copy, as the façade
// sends (the core may change the services it is sent).
func upsert(s *lb.Service) *messages.Upsert {
	return &messages.Upsert{Service: s.DeepCopy(), Reply: make(chan messages.UpsertReply, 1)}
}

func deleteFE(t *testing.T, fe string) *messages.DeleteByFrontend {
	a, err := lb.ParseL3n4Addr(fe)
	require.NoError(t, err)
	return &messages.DeleteByFrontend{Frontend: a, Reply: make(chan messages.DeleteReply, 1)}
}

// ---- Replies.

func ok() func(messages.Request) any {
	return func(r messages.Request) any {
		switch r.(type) {
		case *messages.AllocUnhold, *messages.AllocRestore, *messages.AllocReserve, *messages.AllocDrop, *messages.AllocClaim:
			return &messages.AllocDone{ReqID: r.RequestID()}
		case *messages.AllocRelease:
			return &messages.AllocReleased{ReqID: r.RequestID()}
		case *messages.MaglevApply:
			return &messages.MaglevApplied{ReqID: r.RequestID()}
		}
		return &messages.MapApplied{ReqID: r.RequestID()}
	}
}

func done() func(messages.Request) any { return ok() }

// fail answers a request with err (an acquire: every service of it).
func fail(err error) func(messages.Request) any {
	return func(r messages.Request) any {
		switch m := r.(type) {
		case *messages.AllocAcquire:
			rep := &messages.AllocAcquired{ReqID: r.RequestID(), Items: make([]messages.AcquiredItem, len(m.Items))}
			for i := range rep.Items {
				rep.Items[i].Err = err
			}
			return rep
		case *messages.AllocRelease:
			return &messages.AllocReleased{ReqID: r.RequestID(), Err: err}
		case *messages.AllocUnhold, *messages.AllocRestore, *messages.AllocReserve, *messages.AllocDrop:
			return &messages.AllocDone{ReqID: r.RequestID(), Err: err}
		case *messages.MaglevApply:
			return &messages.MaglevApplied{ReqID: r.RequestID(), Err: err}
		}
		return &messages.MapApplied{ReqID: r.RequestID(), Err: err}
	}
}

// leased answers an AllocLease with these IDs.
func leased(svcIDs []lb.ServiceID, backendIDs []lb.BackendID) func(messages.Request) any {
	return func(r messages.Request) any {
		return &messages.AllocLeased{ReqID: r.RequestID(), ServiceIDs: svcIDs, BackendIDs: backendIDs}
	}
}

// acquired answers an acquire of one service with these IDs.
func acquired(svcID lb.ServiceID, backendIDs ...lb.BackendID) func(messages.Request) any {
	return acquiredEach(granted(svcID, backendIDs...))
}

// acquiredEach answers an acquire of several services, one item each.
func acquiredEach(items ...messages.AcquiredItem) func(messages.Request) any {
	return func(r messages.Request) any {
		return &messages.AllocAcquired{ReqID: r.RequestID(), Items: items}
	}
}

// granted is a service's part of an acquire's answer: these IDs.
func granted(svcID lb.ServiceID, backendIDs ...lb.BackendID) messages.AcquiredItem {
	return messages.AcquiredItem{ServiceID: svcID, BackendIDs: backendIDs}
}

// refused is a service's part of an acquire's answer: err, nothing taken.
func refused(err error) messages.AcquiredItem { return messages.AcquiredItem{Err: err} }

// drifted answers a MapReconcile with what the owner found.
func drifted(ds ...messages.Drift) func(messages.Request) any {
	return func(r messages.Request) any { return &messages.MapReconciled{ReqID: r.RequestID(), Maps: ds} }
}

func dumpedServices(es ...maps.ServiceEntry) func(messages.Request) any {
	return func(r messages.Request) any {
		return &messages.MapDumped[maps.ServiceEntry]{ReqID: r.RequestID(), Entries: maps.EntriesOf(es)}
	}
}

func dumpedBackends(es ...maps.BackendEntry) func(messages.Request) any {
	return func(r messages.Request) any {
		return &messages.MapDumped[maps.BackendEntry]{ReqID: r.RequestID(), Entries: maps.EntriesOf(es)}
	}
}

var errBusy = errors.New("device or resource busy")

// ---- Printing.

func printRequest(r messages.Request) string {
	switch m := r.(type) {
	case *messages.ServiceApply:
		return "write " + list(m.Writes, func(e maps.ServiceEntry) string {
			return fmt.Sprintf("%s#%d", feOf(e.Key), e.Key.Slot)
		}) + del(m.Deletes, func(k maps.ServiceKey) string { return fmt.Sprintf("%s#%d", feOf(k), k.Slot) })
	case *messages.BackendApply:
		return "write " + list(m.Writes, func(e maps.BackendEntry) string {
			s := fmt.Sprintf("%d=%s:%d", e.ID, e.Value.Address, e.Value.Port)
			if st := lb.BackendState(e.Value.State); st != lb.BackendStateActive {
				s += "(" + st.String() + ")"
			}
			return s
		}) + del(m.Deletes, func(id uint32) string { return fmt.Sprint(id) })
	case *messages.RevNATApply:
		s := "write " + list(m.Writes, func(e maps.RevNATEntry) string { return fmt.Sprintf("%d=%s:%d", e.ID, e.Value.Address, e.Value.Port) })
		s += del(m.Deletes4, func(id uint16) string { return fmt.Sprint(id) })
		return s + del(m.Deletes6, func(id uint16) string { return fmt.Sprint(id) })
	case *messages.MemberApply:
		key := func(k maps.MemberKey) string {
			if k.Kind == maps.MemberKindService {
				return fmt.Sprintf("%d/record", k.RevNATIndex)
			}
			return fmt.Sprintf("%d/%d", k.RevNATIndex, k.BackendID)
		}
		return "write " + list(m.Writes, func(e maps.MemberEntry) string {
			if e.Key.Kind == maps.MemberKindService {
				return key(e.Key) + "=" + lb.Source(e.Value.Source).String()
			}
			return fmt.Sprintf("%s=w%d,f%d", key(e.Key), e.Value.Weight, e.Value.Flags)
		}) + del(m.Deletes, key)
	case *messages.AffinityMatchApply:
		f := func(k maps.AffinityMatchKey) string { return fmt.Sprintf("%d/%d", k.RevNATIndex, k.BackendID) }
		return "write " + list(m.Writes, f) + del(m.Deletes, f)
	case *messages.SourceRangeApply:
		f := func(k maps.SourceRangeKey) string {
			if p, ok := k.Prefix(); ok {
				return fmt.Sprintf("%d/%s", k.RevNATIndex, p)
			}
			return k.String()
		}
		return "write " + list(m.Writes, f) + del(m.Deletes, f)
	case *messages.MaglevApply:
		s := "write"
		if m.Sync {
			s = "sync"
		}
		ts := slices.Clone(m.Writes)
		slices.SortFunc(ts, func(a, b messages.MaglevTable) int { return int(a.ID) - int(b.ID) })
		s += " " + list(ts, maglevInputs)
		s += del(m.Deletes4, func(id lb.ServiceID) string { return fmt.Sprint(id) })
		return s + del(m.Deletes6, func(id lb.ServiceID) string { return fmt.Sprint(id) })
	case *messages.MaglevReconcile:
		ts := slices.Clone(m.Tables)
		slices.SortFunc(ts, func(a, b messages.MaglevTable) int { return int(a.ID) - int(b.ID) })
		return "reconcile " + list(ts, maglevInputs)
	case *messages.MapDump:
		return "dump"
	case *messages.MapReconcile:
		return "reconcile"
	case *messages.AllocAcquire:
		// One service: "acquire service A backends [...]"; several:
		// "acquire service A backends [...]; service B backends [...]".
		items := make([]string, len(m.Items))
		for i, it := range m.Items {
			var s string
			if it.Service {
				s = "service " + it.Frontend.String() + " "
				if it.WantID != 0 {
					s += fmt.Sprintf("id %d ", it.WantID)
				}
			}
			items[i] = s + "backends " + list(it.Backends, func(b lb.Backend) string { return table.BackendKey(b).String() })
		}
		return "acquire " + strings.Join(items, "; ")
	case *messages.AllocRelease:
		return "release services " + list(m.Frontends, lb.L3n4Addr.String)
	case *messages.AllocUnhold:
		if len(m.ServiceIDs) > 0 {
			return "unhold services " + list(m.ServiceIDs, func(id lb.ServiceID) string { return fmt.Sprint(id) }) +
				" backends " + list(m.BackendIDs, func(id lb.BackendID) string { return fmt.Sprint(id) })
		}
		return "unhold " + list(m.BackendIDs, func(id lb.BackendID) string { return fmt.Sprint(id) })
	case *messages.AllocLease:
		return fmt.Sprintf("lease %d services %d backends", m.ServiceIDs, m.BackendIDs)
	case *messages.AllocClaim:
		return "claim " + list(m.Bindings, func(b messages.AllocBinding) string { return fmt.Sprintf("%s=%d", b.Key, b.ID) })
	case *messages.AllocRestore:
		binding := func(b messages.AllocBinding) string { return fmt.Sprintf("%s=%d×%d", b.Key, b.ID, b.Refs) }
		svcs, bes := slices.Clone(m.Services), slices.Clone(m.BackendIDs)
		slices.SortFunc(svcs, func(a, b messages.AllocBinding) int { return int(a.ID) - int(b.ID) })
		slices.Sort(bes)
		s := "restore services " + list(svcs, binding) + " backends " + list(bes, func(id lb.BackendID) string { return fmt.Sprint(id) })
		if len(m.Leased) > 0 {
			leased := slices.Sorted(slices.Values(m.Leased))
			s += " leased " + list(leased, func(id lb.ServiceID) string { return fmt.Sprint(id) })
		}
		return s
	case *messages.AllocReserve:
		return fmt.Sprintf("reserve %d for %s", m.ID, m.Key)
	case *messages.AllocDrop:
		return "drop " + m.Key.String()
	}
	return fmt.Sprintf("%T", r)
}

// maglevInputs prints a table's inputs: ID=backend IDs (weight if not
// the default).
func maglevInputs(t messages.MaglevTable) string {
	return fmt.Sprintf("%d=", t.ID) + list(t.Backends, func(b maglev.Backend) string {
		if b.Weight != lb.DefaultBackendWeight {
			return fmt.Sprintf("%d*%d", b.ID, b.Weight)
		}
		return fmt.Sprint(b.ID)
	})
}

func feOf(k maps.ServiceKey) string {
	return lb.L3n4Addr{Addr: k.Address, Port: k.Port, Protocol: lb.L4Type(k.Proto), Scope: lb.Scope(k.Scope)}.String()
}

func list[T any](xs []T, f func(T) string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = f(x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func del[T any](xs []T, f func(T) string) string {
	if len(xs) == 0 {
		return ""
	}
	return " delete " + list(xs, f)
}

func printAnswer(r any) string {
	errOr := func(err error, s string) string {
		if err != nil {
			return "error: " + err.Error()
		}
		return s
	}
	switch r := r.(type) {
	case messages.UpsertReply:
		return "upsert: " + errOr(r.Err, fmt.Sprintf("id %d created %v", r.ID, r.Created))
	case messages.DeleteReply:
		return "delete: " + errOr(r.Err, fmt.Sprintf("id %d", r.ID))
	case messages.UpsertBatchReply:
		return "upsert batch: " + list(r.Results, func(x messages.UpsertReply) string {
			return errOr(x.Err, fmt.Sprintf("id %d created %v", x.ID, x.Created))
		})
	case messages.DeleteBatchReply:
		return "delete batch: " + list(r.Results, func(x messages.DeleteReply) string { return errOr(x.Err, fmt.Sprintf("id %d", x.ID)) })
	case messages.SyncReply:
		return "sync: " + errOr(r.Err, fmt.Sprintf("upserted %d deleted %d", r.Upserted, r.Deleted))
	case messages.ReconcileReply:
		return "reconcile: " + errOr(r.Err, list(r.Maps, func(d messages.Drift) string {
			return fmt.Sprintf("%s pin %s missing %d changed %d extra %d", d.Map, d.Pin, d.Missing, d.Changed, d.Extra)
		}))
	case messages.RevNATReply:
		return "revNAT: " + errOr(r.Err, fmt.Sprintf("%d entries", len(r.Entries)))
	}
	return fmt.Sprintf("%T", r)
}
