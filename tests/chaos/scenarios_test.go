package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/enginetest"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	lbmaps "github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

func quiet() *logrus.Logger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	return l
}

// Scenario (c): the service map fills up in the middle of upserts, with the
// datapath reader running. Every failed upsert is a clear ErrMapFull and
// leaves the previous version intact; the maps end equal to the model.
func TestMapFullMidUpsert(t *testing.T) {
	rng := testutil.Rand(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, m, err := newEngine(ctx, actorlb.Config{BPFRoot: testutil.PinDir(t), Logger: quiet(), MaxEntries: lbmaps.Sizes{Services: 96}}, enginetest.Hooks{})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	reader := startReader(t, m)
	pool := make([]lb.Backend, 40)
	for i := range pool {
		pool[i] = lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), Port: 8080, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight}
	}
	model := NewModel()
	var errCount atomic.Int64
	full := 0
	for i := range 300 {
		fe := lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(rng.IntN(8) + 1)}), Port: 80, Protocol: lb.TCP}
		svc := randomService(rng, fe, pool, model)
		before := errCount.Load()
		require.NoError(t, upsertChecked(ctx, e, model, svc, &errCount, func(err error) error {
			if !errors.Is(err, actorlb.ErrMapFull) {
				return fmt.Errorf("want ErrMapFull, got %w", err)
			}
			if !strings.Contains(err.Error(), "upsert service "+fe.String()+": write service: update lb4_services: map full") {
				return fmt.Errorf("unclear error: %w", err)
			}
			return nil
		}), "op %d", i)
		if errCount.Load() > before {
			full++
		}
	}
	settle(t, e)
	reader.stop(t)
	require.Positive(t, full, "the map never filled up: the scenario tested nothing")
	t.Logf("%d of 300 upserts hit the full map and were rolled back", full)
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Empty(t, model.Diff(list))
	requireMapsEqual(t, m, list)
	d, err := verify.Dump(m)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d))
}

// Scenario (d): pinned maps corrupted by hand before start (a slot to a
// missing backend, a duplicate backend address, a master without revNAT,
// two frontends with one ID); restore repairs each and reports it, and the
// reader then finds nothing dangling while the engine works on.
func TestCorruptedMapsAreRepaired(t *testing.T) {
	root := testutil.PinDir(t)
	m, err := lbmaps.Open(lbmaps.Config{Root: root})
	require.NoError(t, err)
	ip := netip.MustParseAddr
	key := func(vip string, slot uint16) lbmaps.ServiceKey {
		return lbmaps.ServiceKey{Address: ip(vip), Port: 80, Slot: slot, Proto: 6}
	}
	be := func(id uint32, addr string) lbmaps.BackendEntry {
		return lbmaps.BackendEntry{ID: id, Value: lbmaps.BackendValue{Address: ip(addr), Port: 8080, Proto: 6}}
	}
	require.NoError(t, m.Backend4.Update([]lbmaps.BackendEntry{be(1, "10.0.1.5"), be(2, "10.0.1.5"), be(3, "10.0.1.6")}))
	require.NoError(t, m.Service4.Update([]lbmaps.ServiceEntry{
		{Key: key("10.96.0.10", 0), Value: lbmaps.ServiceValue{Count: 2, RevNATIndex: 7}}, // no revNAT
		{Key: key("10.96.0.10", 1), Value: lbmaps.ServiceValue{BackendID: 1, RevNATIndex: 7}},
		{Key: key("10.96.0.10", 2), Value: lbmaps.ServiceValue{BackendID: 9, RevNATIndex: 7}}, // missing backend
		{Key: key("10.96.0.11", 0), Value: lbmaps.ServiceValue{Count: 2, RevNATIndex: 8}},
		{Key: key("10.96.0.11", 1), Value: lbmaps.ServiceValue{BackendID: 2, RevNATIndex: 8}}, // duplicate of 1
		{Key: key("10.96.0.11", 2), Value: lbmaps.ServiceValue{BackendID: 3, RevNATIndex: 8}},
		{Key: key("10.96.0.12", 0), Value: lbmaps.ServiceValue{Count: 1, RevNATIndex: 8}}, // ID 8 again
		{Key: key("10.96.0.12", 1), Value: lbmaps.ServiceValue{BackendID: 3, RevNATIndex: 8}},
	}))
	require.NoError(t, m.RevNAT4.Update([]lbmaps.RevNATEntry{{ID: 8, Value: lbmaps.RevNATValue{Address: ip("10.96.0.11"), Port: 80}}}))
	d, err := verify.Dump(m)
	require.NoError(t, err)
	require.NotEmpty(t, verify.Check(d), "the maps start broken")
	require.NoError(t, m.Close())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, em, err := newEngine(ctx, actorlb.Config{BPFRoot: root, Logger: quiet()}, enginetest.Hooks{})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	for _, kind := range []string{"dangling-slot", "missing-revnat", "duplicate-backend", "duplicate-service-id"} {
		require.Positive(t, st.Restore.RepairsByKind[kind], "repair %s reported: %v", kind, st.Restore.RepairsByKind)
	}
	d, err = verify.Dump(em)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d), "invariants after restore")

	reader := startReader(t, em)
	for i := range 50 {
		svc := &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: ip("10.96.0.10"), Port: 80, Protocol: lb.TCP}}}
		for j := range 1 + i%5 {
			svc.Backends = append(svc.Backends, lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: ip(fmt.Sprintf("10.0.2.%d", j+1)), Port: 8080, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight})
		}
		_, _, err := e.Upsert(ctx, svc)
		require.NoError(t, err)
	}
	reader.stop(t)
	d, err = verify.Dump(em)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d))
}

// settle waits (bounded) until no operation is in flight, such as the
// refreshes a backend state change queues for other services.
func settle(t *testing.T, e *actorlb.Engine) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := e.Stats(context.Background())
		return err == nil && st.OpsInFlight == 0
	}, 20*time.Second, 10*time.Millisecond, "operations in flight")
}
