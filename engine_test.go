package actorlb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/enginetest"
	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The actor library's dead-letter throttle lives up to one interval.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
		goleak.IgnoreTopFunction("time.Sleep"),
	)
	os.Exit(0)
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	l.SetOutput(os.Stderr)
	return l
}

// newEngine starts an engine, closed when tb ends, on the maps pinned under
// root; when root is "", on fresh maps: kernel maps pinned in a new bpffs
// directory when tb may use them, in-memory maps otherwise (required to be
// kernel maps under ACTORLB_REQUIRE_PRIVILEGED=1, see testutil.KernelMaps).
// In-memory maps live as long as their engine (maps.Open makes new ones
// each time), so a test that starts a second engine on the first one's maps
// passes a root from testutil.PinDir and needs privileges.
func newEngine(tb testing.TB, root string, cfg Config) *Engine {
	tb.Helper()
	if root == "" && !cfg.InMemory {
		if testutil.KernelMaps(tb) {
			root = testutil.PinDir(tb)
		} else {
			cfg.InMemory = true
		}
	}
	cfg.BPFRoot = root
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := New(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, e.Close()) })
	return e
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func mustService(tb testing.TB, fe string, backends ...string) *lb.Service {
	tb.Helper()
	a, err := lb.ParseL3n4Addr(fe)
	require.NoError(tb, err)
	svc := &lb.Service{Frontend: lb.Frontend{L3n4Addr: a}}
	for _, b := range backends {
		be, err := lb.ParseBackend(b)
		require.NoError(tb, err)
		svc.Backends = append(svc.Backends, be)
	}
	return svc
}

func TestUpsertGetDelete(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	id, created, err := e.Upsert(ctx, mustService(t, "10.96.0.10:80", "10.0.1.6:8080", "10.0.1.5:8080"))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, lb.ServiceID(1), id)
	require.Equal(t, []string{
		"SVC: 10.96.0.10:80/TCP#0 count=2 revnat=svc1 flags=0x40",
		"SVC: 10.96.0.10:80/TCP#1 backend=be1 revnat=svc1",
		"SVC: 10.96.0.10:80/TCP#2 backend=be2 revnat=svc1",
		"BE: be1 10.0.1.5:8080/TCP active",
		"BE: be2 10.0.1.6:8080/TCP active",
		"REV: svc1 10.96.0.10:80",
	}, verify.Format(dumpMaps(t, e), true), "slots in backend order, one revNAT entry")
	got, err := e.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "10.0.1.5:8080/TCP", got.Backends[0].String())
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Services)
	require.Equal(t, 2, st.Backends)
	require.NoError(t, e.Delete(ctx, id))
	_, err = e.Get(ctx, id)
	require.ErrorIs(t, err, ErrServiceNotFound)
	s4, err := e.maps.Service4.Dump()
	require.NoError(t, err)
	require.Empty(t, s4)
	b4, err := e.maps.Backend4.Dump()
	require.NoError(t, err)
	require.Empty(t, b4)
	r4, err := e.maps.RevNAT4.Dump()
	require.NoError(t, err)
	require.Empty(t, r4)
}

func TestUpsertErrors(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	svc := mustService(t, "10.96.0.10:80", "10.0.1.5:8080")
	svc.Frontend.ID = 7
	id, created, err := e.Upsert(ctx, svc)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, lb.ServiceID(7), id)

	// Same again: updated, not created.
	_, created, err = e.Upsert(ctx, svc)
	require.NoError(t, err)
	require.False(t, created)

	other := mustService(t, "10.96.0.11:80", "10.0.1.5:8080")
	other.Frontend.ID = 7
	_, _, err = e.Upsert(ctx, other)
	require.ErrorIs(t, err, ErrServiceIDInUse)
	require.EqualError(t, err, "upsert service 10.96.0.11:80/TCP: service ID in use: service ID 7 is already registered to 10.96.0.10:80/TCP")

	again := mustService(t, "10.96.0.10:80", "10.0.1.5:8080")
	again.Frontend.ID = 8
	_, _, err = e.Upsert(ctx, again)
	require.ErrorIs(t, err, ErrFrontendInUse)
	require.EqualError(t, err, "upsert service 10.96.0.10:80/TCP: frontend in use: frontend 10.96.0.10:80/TCP is already registered with ID 7")

	bad := mustService(t, "10.96.0.12:80", "[fd00::1]:80")
	_, _, err = e.Upsert(ctx, bad)
	require.ErrorIs(t, err, lb.ErrInvalid)
	require.ErrorContains(t, err, "backends[0].address")

	// Terminating is final.
	term := mustService(t, "10.96.0.10:80", "10.0.1.5:8080")
	term.Backends[0].State = lb.BackendStateTerminating
	_, _, err = e.Upsert(ctx, term)
	require.NoError(t, err)
	back := mustService(t, "10.96.0.10:80", "10.0.1.5:8080")
	_, _, err = e.Upsert(ctx, back)
	require.ErrorIs(t, err, lb.ErrInvalidStateTransition)

	require.ErrorIs(t, e.Delete(ctx, 99), ErrServiceNotFound)
	require.EqualError(t, e.Delete(ctx, 99), "delete service 99: service not found")
	_, err = e.DeleteByFrontend(ctx, other.Frontend.L3n4Addr)
	require.ErrorIs(t, err, ErrServiceNotFound)

	// Nothing rejected touched a map: one service, one backend, one revNAT.
	s4, err := e.maps.Service4.Dump()
	require.NoError(t, err)
	require.Len(t, s4, 2)
	b4, err := e.maps.Backend4.Dump()
	require.NoError(t, err)
	require.Len(t, b4, 1)
	require.Equal(t, uint8(lb.BackendStateTerminating), b4[0].Value.State)
}

func TestMapFullRollsBack(t *testing.T) {
	e := newEngine(t, "", Config{MaxEntries: maps.Sizes{Services: 6}})
	ctx := ctxT(t)
	prev := mustService(t, "10.96.0.10:80", "10.0.1.1:80", "10.0.1.2:80")
	id, _, err := e.Upsert(ctx, prev)
	require.NoError(t, err)
	before := dumpAll(t, e)
	big := mustService(t, "10.96.0.10:80", "10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80", "10.0.1.4:80", "10.0.1.5:80", "10.0.1.6:80")
	_, _, err = e.Upsert(ctx, big)
	require.ErrorIs(t, err, ErrMapFull)
	require.ErrorContains(t, err, "upsert service 10.96.0.10:80/TCP: write service: update lb4_services: map full")
	require.Equal(t, before, dumpAll(t, e), "the previous version is intact")
	got, err := e.Get(ctx, id)
	require.NoError(t, err)
	require.Len(t, got.Backends, 2)

	// A new service that does not fit leaves nothing behind.
	_, _, err = e.Upsert(ctx, mustService(t, "10.96.0.11:80", "10.0.2.1:80", "10.0.2.2:80", "10.0.2.3:80", "10.0.2.4:80"))
	require.ErrorIs(t, err, ErrMapFull)
	require.Equal(t, before, dumpAll(t, e))
}

// An update that gives a backend of another service a new state writes
// that backend before the service map; when the service map then refuses
// the writes (more often than they are retried), the rollback gives the
// other service its backend state back: the maps are as before.
func TestFailedUpdateRestoresSharedBackendState(t *testing.T) {
	var failWrites atomic.Bool
	var refused atomic.Int64
	e := newEngine(t, "", Config{hooks: enginetest.Hooks{Fault: func(name string, op maps.Op, n uint64, entries int) error {
		if failWrites.Load() && op == maps.OpUpdate && name == maps.Service4Name {
			refused.Add(1)
			return syscall.EBUSY
		}
		return nil
	}}})
	ctx := ctxT(t)
	keep := mustService(t, "10.96.9.9:80", "10.0.1.1:8080") // active
	keepID, _, err := e.Upsert(ctx, keep)
	require.NoError(t, err)
	upd := mustService(t, "10.96.0.1:80", "10.0.1.2:8080")
	updID, _, err := e.Upsert(ctx, upd)
	require.NoError(t, err)
	before, err := e.List(ctx)
	require.NoError(t, err)
	mapsBefore := dumpAll(t, e)

	upd = mustService(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")
	upd.Backends[0].State = lb.BackendStateQuarantined // shared with keep
	failWrites.Store(true)
	_, created, err := e.Upsert(ctx, upd)
	failWrites.Store(false)
	require.ErrorIs(t, err, syscall.EBUSY)
	require.ErrorContains(t, err, "upsert service 10.96.0.1:80/TCP: write service:")
	require.False(t, created)
	require.Greater(t, refused.Load(), int64(1), "the service write was retried")
	settle(t, e)

	require.Equal(t, mapsBefore, dumpAll(t, e), "maps as before, the shared backend's state included")
	after, err := e.List(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "the update was rolled back")
	got, err := e.Get(ctx, keepID)
	require.NoError(t, err)
	require.Equal(t, lb.BackendStateActive, got.Backends[0].State)
	checkInvariants(t, e)

	// Once the map takes writes again, the same update goes through and
	// the new state reaches the other service.
	_, created, err = e.Upsert(ctx, upd)
	require.NoError(t, err)
	require.False(t, created)
	settle(t, e)
	got, err = e.Get(ctx, keepID)
	require.NoError(t, err)
	require.Equal(t, lb.BackendStateQuarantined, got.Backends[0].State)
	got, err = e.Get(ctx, updID)
	require.NoError(t, err)
	require.Len(t, got.Backends, 2)
	checkInvariants(t, e)
}

// dumpMaps reads the six maps of e.
func dumpMaps(tb testing.TB, e *Engine) table.Dump {
	tb.Helper()
	d, err := verify.Dump(e.maps)
	require.NoError(tb, err)
	return d
}

// dumpAll renders every entry of e's maps, IDs included, one line each
// (verify.Format), to compare the maps before and after.
func dumpAll(tb testing.TB, e *Engine) []string {
	tb.Helper()
	return verify.Format(dumpMaps(tb, e), false)
}

// A restore reads the service and backend maps as their dumps' raw chunks
// (maps.Entries, a batch lookup each): maps of several chunks, in both
// families, come back whole, with nothing to repair.
func TestRestoreOfMapsOfManyDumpChunksKeepsEverything(t *testing.T) {
	root := testutil.PinDir(t)
	ctx := ctxT(t)
	e1, err := New(ctx, Config{BPFRoot: root, Logger: quietLogger()})
	require.NoError(t, err)
	var svcs []*lb.Service
	for i := range 1000 { // 11,000 IPv4 service entries, 10,000 backends: three chunks each
		var bes []string
		for j := range 10 {
			bes = append(bes, fmt.Sprintf("10.1.%d.%d:8080", (i*10+j)/256, (i*10+j)%256))
		}
		svcs = append(svcs, mustService(t, fmt.Sprintf("10.96.%d.%d:80", i/256, i%256), bes...))
	}
	for i := range 500 { // and two of IPv6
		var bes []string
		for j := range 10 {
			bes = append(bes, fmt.Sprintf("[fd00::1:%x]:8080", i*10+j))
		}
		svcs = append(svcs, mustService(t, fmt.Sprintf("[fd00::a:%x]:443", i), bes...))
	}
	rs, err := e1.UpsertBatch(ctx, svcs)
	require.NoError(t, err)
	for _, r := range rs {
		require.NoError(t, r.Err)
	}
	restartKeepsEverything(t, root, e1, len(svcs))
}

// restartKeepsEverything closes e, makes an engine again on its maps at
// root and requires it to hold what e held (the same services, IDs, slot
// order and options; the same map entries) after a restore of services
// services that repaired and wrote nothing. It returns the new engine.
func restartKeepsEverything(t *testing.T, root string, e *Engine, services int) *Engine {
	t.Helper()
	ctx := ctxT(t)
	list1, err := e.List(ctx)
	require.NoError(t, err)
	maps1 := dumpAll(t, e)
	require.NoError(t, e.Close())

	e2 := newEngine(t, root, Config{})
	list2, err := e2.List(ctx)
	require.NoError(t, err)
	require.Equal(t, list1, list2, "same IDs, same slot order, same options")
	st, err := e2.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Restore.Repairs)
	require.Zero(t, st.MapWrites(), "restore wrote nothing")
	require.Equal(t, services, st.Restore.Services)
	require.Equal(t, maps1, dumpAll(t, e2))
	return e2
}

// Restarts on the same maps: pinned kernel maps only, in-memory maps do not
// outlive their engine.
func TestRestoreKeepsIDsAndWritesNothing(t *testing.T) {
	root := testutil.PinDir(t)
	ctx := ctxT(t)
	e1, err := New(ctx, Config{BPFRoot: root, Logger: quietLogger()})
	require.NoError(t, err)
	desired := []*lb.Service{
		mustService(t, "10.96.0.10:53/udp", "10.0.1.5:53/udp", "10.0.1.6:53/udp"),
		mustService(t, "[fd00::a]:443", "[fd00::1:5]:8443", "[fd00::1:6]:8443"),
		mustService(t, "10.96.0.11:80", "10.0.1.5:8080", "10.0.1.7:8080", "10.0.1.6:8080"),
	}
	desired[2].Backends[1].State = lb.BackendStateTerminating
	desired[2].Type = lb.SVCTypeNodePort
	desired[2].SessionAffinity = true
	desired[2].SessionAffinityTimeout = 600
	_, err = e1.Sync(ctx, desired)
	require.NoError(t, err)
	e2 := restartKeepsEverything(t, root, e1, 3)

	// Re-applying the same desired state writes nothing either.
	res, err := e2.Sync(ctx, desired)
	require.NoError(t, err)
	require.Equal(t, SyncResult{Upserted: 3}, res)
	st, err := e2.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.MapWrites())

	// A standalone revNAT entry does not survive a restart: restore cannot
	// tell it from the leftover of a crashed create or delete, so it
	// deletes it rather than leak its ID.
	require.NoError(t, e2.RevNATAdd(ctx, 100, lb.L3n4Addr{Addr: netip.MustParseAddr("10.96.1.1"), Port: 80}))
	require.NoError(t, e2.Close())
	e3 := newEngine(t, root, Config{})
	st, err = e3.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orphan-revnat": 1}, st.Restore.RepairsByKind)
	require.Equal(t, uint64(1), st.MapWrites())
	_, err = e3.RevNATGet(ctx, 100)
	require.ErrorIs(t, err, ErrRevNATNotFound)
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// settle waits (bounded) until no operation is in flight, such as the
// refreshes a backend state change queues for other services.
func settle(tb testing.TB, e *Engine) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		st, err := e.Stats(ctxT(tb))
		return err == nil && st.OpsInFlight == 0
	}, 10*time.Second, 5*time.Millisecond, "operations still in flight")
}

// A backend has one state: changing it through one service changes it in
// every service that uses it, maps included.
func TestBackendStateIsSharedAcrossServices(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	a := mustService(t, "10.96.0.10:80", "10.0.1.5:8080", "10.0.1.6:8080")
	b := mustService(t, "10.96.0.11:80", "10.0.1.5:8080", "10.0.1.7:8080")
	_, _, err := e.Upsert(ctx, a)
	require.NoError(t, err)
	idB, _, err := e.Upsert(ctx, b)
	require.NoError(t, err)

	a.Backends[0].State = lb.BackendStateTerminating // 10.0.1.5
	_, _, err = e.Upsert(ctx, a)
	require.NoError(t, err)
	settle(t, e)
	got, err := e.Get(ctx, idB)
	require.NoError(t, err)
	require.Equal(t, "10.0.1.7:8080/TCP", got.Backends[0].String(), "active first")
	require.Equal(t, lb.BackendStateTerminating, got.Backends[1].State)
	master, ok, err := e.maps.Service4.Lookup(maps.ServiceKey{Address: netip.MustParseAddr("10.96.0.11"), Port: 80, Proto: 6})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint16(1), master.Value.Count)
	require.Equal(t, uint16(1), master.Value.QCount)
	checkInvariants(t, e)

	// Terminating is final for the backend, whichever service asks.
	_, _, err = e.Upsert(ctx, b)
	require.ErrorIs(t, err, lb.ErrInvalidStateTransition)
	require.ErrorContains(t, err, "backend 10.0.1.5:8080")
}

func TestSessionAffinityDefaultTimeoutIsStored(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	svc := mustService(t, "10.96.0.10:80", "10.0.1.5:8080")
	svc.SessionAffinity = true
	id, _, err := e.Upsert(ctx, svc)
	require.NoError(t, err)
	got, err := e.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, lb.DefaultSessionAffinityTimeout, got.SessionAffinityTimeout)
}

// Two services sharing a backend change its state concurrently: whatever
// the order, both services and the backend map end with one state, and a
// change that comes after terminating is refused.
func TestConcurrentStateChangesOnASharedBackend(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	for round := range 30 {
		be := fmt.Sprintf("10.0.%d.5:8080", round+1)
		a := mustService(t, "10.96.0.10:80", be)
		b := mustService(t, "10.96.0.11:80", be)
		_, _, err := e.Upsert(ctx, a)
		require.NoError(t, err)
		_, _, err = e.Upsert(ctx, b)
		require.NoError(t, err)
		a.Backends[0].State = lb.BackendStateTerminating
		b.Backends[0].State = lb.BackendStateQuarantined
		errA, errB := make(chan error, 1), make(chan error, 1)
		go func() { _, _, err := e.Upsert(ctx, a); errA <- err }()
		go func() { _, _, err := e.Upsert(ctx, b); errB <- err }()
		e1, e2 := <-errA, <-errB
		if e2 != nil {
			require.ErrorIs(t, e2, lb.ErrInvalidStateTransition, "round %d", round)
		}
		settle(t, e)
		list, err := e.List(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		st := list[0].Backends[0].State
		require.Equal(t, st, list[1].Backends[0].State, "round %d: one state per backend", round)
		// Either order ends terminating: terminating then quarantined is
		// refused, quarantined then terminating is allowed.
		require.Equal(t, lb.BackendStateTerminating, st, "round %d (errors: %v, %v)", round, e1, e2)
		require.NoError(t, e1, "round %d: active or quarantined to terminating is allowed", round)
		b4, err := e.maps.Backend4.Dump()
		require.NoError(t, err)
		require.Len(t, b4, 1)
		require.Equal(t, uint8(st), b4[0].Value.State, "round %d: the map holds it", round)
		checkInvariants(t, e)
		_, err = e.Sync(ctx, nil)
		require.NoError(t, err)
	}
}

// The engine puts the backends of the services it is sent in slot order
// in place, so every call sends it copies: the caller's services are as
// they were, backends out of slot order included, whatever the call.
func TestCallsLeaveTheCallersServicesAsSent(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	svc := func(fe string) *lb.Service {
		return mustService(t, fe, "10.0.9.3:8080", "10.0.9.1:8080", "10.0.9.2:8080") // not in slot order
	}
	one, batch, synced := svc("10.96.8.1:80"), []*lb.Service{svc("10.96.8.2:80"), svc("10.96.8.3:80")}, svc("10.96.8.4:80")
	synced.Source = lb.SourceKubernetes
	before := []*lb.Service{one.DeepCopy(), batch[0].DeepCopy(), batch[1].DeepCopy(), synced.DeepCopy()}

	id, _, err := e.Upsert(ctx, one)
	require.NoError(t, err)
	rs, err := e.UpsertBatch(ctx, batch)
	require.NoError(t, err)
	for _, r := range rs {
		require.NoError(t, r.Err)
	}
	_, err = e.SyncSource(ctx, lb.SourceKubernetes, []*lb.Service{synced})
	require.NoError(t, err)

	require.Equal(t, before, []*lb.Service{one, batch[0], batch[1], synced})
	got, err := e.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "10.0.9.1", got.Backends[0].Addr.String(), "the engine's own copy is in slot order")
}
