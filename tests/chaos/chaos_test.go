package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/actors"
	"github.com/actorlb/actorlb/internal/enginetest"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	lbmaps "github.com/actorlb/actorlb/maps"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// newEngine starts an engine with the test hooks h and returns it with
// its maps, to read while it runs.
func newEngine(ctx context.Context, cfg actorlb.Config, h enginetest.Hooks) (*actorlb.Engine, *lbmaps.LBMaps, error) {
	var m *lbmaps.LBMaps
	h.Maps = func(x *lbmaps.LBMaps) { m = x }
	e, err := actorlb.New(ctx, enginetest.With(cfg, h))
	return e, m, err
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
		goleak.IgnoreTopFunction("time.Sleep"),
	)
}

// killPlan arms one-shot panics in named actors, before or after they
// handle their next message.
type killPlan struct {
	mu    sync.Mutex
	armed map[string]bool // actor PID Id -> panic after (true) or before (false)
	fired atomic.Int64
}

func (p *killPlan) arm(id string, after bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed[id] = after
}

func (p *killPlan) take(id string) (armed, after bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	after, armed = p.armed[id]
	delete(p.armed, id)
	return armed, after
}

func (p *killPlan) middleware() actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			switch env.Message.(type) {
			case actor.SystemMessage, actor.AutoReceiveMessage:
				next(c, env) // never inject into lifecycle messages
				return
			}
			armed, after := p.take(c.Self().Id)
			if armed && !after {
				p.fired.Add(1)
				panic(fmt.Sprintf("chaos: kill %s before %T", c.Self().Id, env.Message))
			}
			next(c, env)
			if armed {
				p.fired.Add(1)
				panic(fmt.Sprintf("chaos: kill %s after %T", c.Self().Id, env.Message))
			}
		}
	}
}

// faults fails about one map update or delete in rate with EBUSY or
// ENOMEM, decided by a hash of the seed and the call, so a seed replays.
func faults(seed uint64, rate uint64, count *atomic.Int64) lbmaps.FaultFunc {
	return func(name string, op lbmaps.Op, n uint64, entries int) error {
		if op != lbmaps.OpUpdate && op != lbmaps.OpDelete {
			return nil
		}
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s/%d/%d", seed, name, op, n)
		v := h.Sum64()
		if v%rate != 0 {
			return nil
		}
		count.Add(1)
		if v&1 == 0 {
			return syscall.EBUSY
		}
		return syscall.ENOMEM
	}
}

type config struct {
	clients, ops int
	killEvery    int64
	faultRate    uint64
}

func configFromEnv(t *testing.T) config {
	c := config{clients: 8, ops: 10000, killEvery: 50, faultRate: 400}
	if v := os.Getenv("CHAOS_OPS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "CHAOS_OPS")
		c.ops = n
	}
	return c
}

// TestChaos is scenario (a) and (e): concurrent clients, an actor killed
// about every 50 operations (every actor type, the supervisor included, by
// panic before or after a message or by stop), map writes failing, and a
// datapath-like reader walking the maps all along.
func TestChaos(t *testing.T) {
	cfg := configFromEnv(t)
	seed := testutil.Seed(t)
	root := testutil.PinDir(t)
	plan := &killPlan{armed: map[string]bool{}}
	var faultCount atomic.Int64
	reconciles := &reconcileLog{}
	log := chaosLogger(reconciles)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute+time.Duration(cfg.ops)*20*time.Millisecond)
	defer cancel()
	e, m, err := newEngine(ctx, actorlb.Config{BPFRoot: root, Logger: log, CallTimeout: 20 * time.Second, ReconcileInterval: 50 * time.Millisecond}, enginetest.Hooks{
		Fault:                faults(seed, cfg.faultRate, &faultCount),
		ChildMiddleware:      []actor.ReceiverMiddleware{plan.middleware()},
		SupervisorMiddleware: []actor.ReceiverMiddleware{plan.middleware()},
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()

	reader := startReader(t, m)

	// Each client has its own 48 backends, shared by its services (a
	// backend has one state across services, so backends shared between
	// clients would make outcomes depend on their interleaving).
	pools := make([][]lb.Backend, cfg.clients)
	for c := range pools {
		pools[c] = make([]lb.Backend, 48)
		for i := range pools[c] {
			addr := netip.AddrFrom4([4]byte{10, 1, byte(c), byte(i + 1)})
			if c%2 == 1 { // odd clients use IPv6
				addr = netip.AddrFrom16([16]byte{0xfd, 0, 1, 0, 14: byte(c), 15: byte(i + 1)})
			}
			pools[c][i] = lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: addr, Port: 8080, Protocol: lb.TCP}, Weight: chaosWeight(i), NodeLocal: i%5 == 0}
		}
	}
	var (
		models   = make([]*Model, cfg.clients)
		syncMu   sync.RWMutex // sync takes every client's frontends: it runs alone
		opCount  atomic.Int64
		kills    atomic.Int64
		stops    atomic.Int64
		errCount atomic.Int64
		wg       sync.WaitGroup
		failures = make(chan error, cfg.clients)
	)
	victims := actorlb.ActorNames
	kill := func(rng *rand.Rand) {
		name := victims[rng.IntN(len(victims))]
		id := actors.SupervisorPID
		if name != actors.SupervisorName {
			id += "/" + name
		}
		switch rng.IntN(3) {
		case 0:
			require.NoError(t, e.StopActor(name))
			stops.Add(1)
		default:
			plan.arm(id, rng.IntN(2) == 0)
		}
		kills.Add(1)
	}
	for c := range cfg.clients {
		models[c] = NewModel() // all before any client runs: syncs read every model
	}
	for c := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)+1))
			if err := runClient(ctx, e, c, rng, pools, models, &syncMu, cfg.ops/cfg.clients, func() {
				if opCount.Add(1)%cfg.killEvery == 0 {
					kill(rng)
				}
			}, &errCount); err != nil {
				failures <- fmt.Errorf("client %d: %w (TEST_SEED=%d)", c, err, seed)
			}
		}()
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	reader.stop(t)
	if t.Failed() {
		return
	}

	// Every armed kill fired or is still pending; disarm and settle.
	plan.mu.Lock()
	plan.armed = map[string]bool{}
	plan.mu.Unlock()

	settle(t, e)
	want := NewModel()
	for _, m := range models {
		for k, v := range m.Services {
			want.Services[k] = v
		}
	}
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Empty(t, want.Diff(list), "engine vs model (TEST_SEED=%d)", seed)
	requireMapsEqual(t, m, list)
	requireFixedOptions(t, list)
	d, err := verify.Dump(m)
	require.NoError(t, err)
	require.NotEmpty(t, d.Members, "weights and node-local flags are in lb_members")
	require.Empty(t, verify.Check(d), "invariants 1-4, 6 and 8 (what actorlb bpf lb verify checks)")
	require.NotEmpty(t, d.SourceRanges, "services with source ranges have their entries")
	mvs, err := verify.CheckMaglev(d, [2]verify.MaglevReader{m.Maglev4, m.Maglev6})
	require.NoError(t, err)
	require.Empty(t, mvs, "invariant 7: the Maglev tables")
	tables, err := m.Maglev4.IDs()
	require.NoError(t, err)
	tables6, err := m.Maglev6.IDs()
	require.NoError(t, err)
	require.NotEmpty(t, append(tables, tables6...), "maglev services have tables")
	// Nobody but the engine wrote the maps: the reconciles that ran all
	// along (with kills and faults) must have found nothing to repair, and
	// one now finds every map equal to what its owner wrote.
	ds, err := e.Reconcile(ctx)
	require.NoError(t, err)
	for _, d := range ds {
		require.Zero(t, d.Repairs(), "reconcile after chaos: %+v\n%s", d, reconciles)
	}
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, st.DriftRepairs, "reconciles during chaos repaired what nobody tampered with\n%s", reconciles)
	require.Greater(t, st.Reconciles, uint64(1))
	t.Logf("chaos: %d reconciles (last error: %v); %s", st.Reconciles, st.LastReconcileError, reconciles)
	t.Logf("chaos: %d ops, %d kills (%d stops, %d panics fired), %d map faults, %d op errors, %d reader walks, restarts %v, resent %d",
		opCount.Load(), kills.Load(), stops.Load(), plan.fired.Load(), faultCount.Load(), errCount.Load(), reader.walks.Load(), st.ActorRestarts, st.RequestsResent)
	require.Positive(t, plan.fired.Load()+stops.Load())
}

// runClient runs n random operations on the client's own frontends and
// keeps its model; sync (rare) covers every client's frontends.
func runClient(ctx context.Context, e *actorlb.Engine, c int, rng *rand.Rand, pools [][]lb.Backend, models []*Model, syncMu *sync.RWMutex, n int, tick func(), errCount *atomic.Int64) error {
	model := models[c]
	fes := make([]lb.L3n4Addr, 12)
	for i := range fes {
		addr := netip.AddrFrom4([4]byte{10, 96, byte(c), byte(i + 1)})
		if c%2 == 1 {
			addr = netip.AddrFrom16([16]byte{0xfd, 0, 0x96, 0, 14: byte(c), 15: byte(i + 1)})
		}
		fes[i] = lb.L3n4Addr{Addr: addr, Port: 80, Protocol: lb.TCP}
	}
	for i := range n {
		tick()
		fe := fes[rng.IntN(len(fes))]
		r := rng.IntN(100)
		if r == 0 {
			if err := runSync(ctx, e, rng, pools, models, syncMu, errCount); err != nil {
				return fmt.Errorf("op %d sync: %w", i, err)
			}
			continue
		}
		syncMu.RLock()
		var err error
		switch {
		case r < 70:
			err = upsert(ctx, e, model, randomService(rng, fe, pools[c], model), errCount)
		case r < 75:
			err = upsertBatch(ctx, e, model, rng, fes, pools[c], errCount)
		case r < 95:
			err = del(ctx, e, model, fe, rng.IntN(2) == 0, errCount)
		default:
			err = deleteBatch(ctx, e, model, rng, fes, errCount)
		}
		syncMu.RUnlock()
		if err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
	}
	return nil
}

// randomService draws 1..32 backends; states follow the allowed
// transitions from each backend's current state.
func randomService(rng *rand.Rand, fe lb.L3n4Addr, pool []lb.Backend, model *Model) *lb.Service {
	svc := &lb.Service{Frontend: lb.Frontend{L3n4Addr: fe}, SessionAffinity: chaosAffinity(fe), Source: chaosSource(fe), LBAlgorithm: chaosAlgorithm(fe)}
	if rs, deny := chaosRanges(fe); rs != nil {
		svc.Type, svc.SourceRanges, svc.SourceRangesDeny = lb.SVCTypeLoadBalancer, rs, deny
	}
	n := 1 + rng.IntN(min(32, len(pool)))
	for _, i := range rng.Perm(len(pool))[:n] {
		b := pool[i]
		prev, had := model.State(b.String())
		switch {
		case had && prev == lb.BackendStateTerminating:
			b.State = prev
		case had:
			b.State = []lb.BackendState{lb.BackendStateActive, lb.BackendStateQuarantined}[rng.IntN(2)]
		default:
			b.State = []lb.BackendState{lb.BackendStateActive, lb.BackendStateActive, lb.BackendStateTerminating}[rng.IntN(3)]
		}
		svc.Backends = append(svc.Backends, b)
	}
	return svc
}

// chaosWeight is the weight of pool backend i, and chaosAffinity whether
// frontend fe has session affinity: fixed, so that the model needs not
// track them, and the final check can tell that every lb_members and
// lb_affinity_match entry came through the kills and faults.
func chaosWeight(i int) uint16 { return []uint16{100, 100, 100, 1, 7, 300, 0}[i%7] }

func chaosAffinity(fe lb.L3n4Addr) bool { return fe.Addr.As16()[15]%2 == 0 }

// chaosAlgorithm is frontend fe's algorithm: maglev for one in four, so
// that their tables go through the kills and faults too.
func chaosAlgorithm(fe lb.L3n4Addr) lb.LBAlgorithm {
	if fe.Addr.As16()[15]%4 == 1 {
		return lb.LBAlgMaglev
	}
	return lb.LBAlgDefault
}

// chaosRanges are frontend fe's source ranges (a LoadBalancer then) and
// whether they deny: one frontend in five has two, of its family, in the
// engine's order (an IPv6 one a deny list), so that their entries go
// through the kills and faults too.
func chaosRanges(fe lb.L3n4Addr) ([]netip.Prefix, bool) {
	if fe.Addr.As16()[15]%5 != 2 {
		return nil, false
	}
	if fe.Addr.Is6() {
		return []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/48"), netip.MustParsePrefix("2001:db8:2::/64")}, true
	}
	return []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24")}, false
}

// chaosSource is the source that owns frontend fe: fixed, so that every
// write knows its writer, and the final check can tell that the source
// records came through the kills and faults.
func chaosSource(fe lb.L3n4Addr) lb.Source {
	if fe.Addr.As16()[15]%3 == 0 {
		return lb.SourceKubernetes
	}
	return lb.SourceAPI
}

// requireFixedOptions checks the weights, node-local flags and affinity
// the pools and chaosAffinity give every service.
func requireFixedOptions(t *testing.T, list []*lb.Service) {
	t.Helper()
	for _, svc := range list {
		require.Equal(t, chaosAffinity(svc.Frontend.L3n4Addr), svc.SessionAffinity, "affinity of %s", svc.Frontend)
		require.Equal(t, chaosSource(svc.Frontend.L3n4Addr), svc.Source, "source of %s", svc.Frontend)
		require.Equal(t, chaosAlgorithm(svc.Frontend.L3n4Addr), svc.LBAlgorithm, "algorithm of %s", svc.Frontend)
		rs, deny := chaosRanges(svc.Frontend.L3n4Addr)
		require.Equal(t, rs, svc.SourceRanges, "source ranges of %s", svc.Frontend)
		require.Equal(t, deny, svc.SourceRangesDeny, "source ranges deny of %s", svc.Frontend)
		for _, b := range svc.Backends {
			i := int(b.Addr.As16()[15]) - 1
			require.Equal(t, chaosWeight(i), b.Weight, "weight of %s in %s", b, svc.Frontend)
			require.Equal(t, i%5 == 0, b.NodeLocal, "node-local flag of %s in %s", b, svc.Frontend)
		}
	}
}

// current reads what the engine holds for fe (nil: absent).
func current(ctx context.Context, e *actorlb.Engine, fe lb.L3n4Addr) (*lb.Service, error) {
	list, err := e.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range list {
		if s.Frontend.L3n4Addr == fe {
			return s, nil
		}
	}
	return nil, nil
}

func upsert(ctx context.Context, e *actorlb.Engine, model *Model, svc *lb.Service, errCount *atomic.Int64) error {
	return upsertChecked(ctx, e, model, svc, errCount, nil)
}

// upsertChecked is upsert with a check on the error of a failed call.
func upsertChecked(ctx context.Context, e *actorlb.Engine, model *Model, svc *lb.Service, errCount *atomic.Int64, checkErr func(error) error) error {
	id, created, err := e.Upsert(ctx, svc)
	return checkUpsert(ctx, e, model, svc, id, created, err, errCount, checkErr)
}

// upsertBatch upserts 2..4 services of distinct frontends with one
// UpsertBatch call; each result must be what the upsert alone would give.
// The services are independent (no backend of one, new or old, is a new
// backend of another), so each outcome can be checked on its own.
func upsertBatch(ctx context.Context, e *actorlb.Engine, model *Model, rng *rand.Rand, fes []lb.L3n4Addr, pool []lb.Backend, errCount *atomic.Int64) error {
	k := 2 + rng.IntN(3)
	perm := rng.Perm(len(pool))
	chunk := len(pool) / k
	var svcs []*lb.Service
	var news, olds []map[string]bool
	for t, i := range rng.Perm(len(fes))[:k] {
		sub := make([]lb.Backend, chunk)
		for j := range sub {
			sub[j] = pool[perm[t*chunk+j]]
		}
		svc := randomService(rng, fes[i], sub, model)
		nw, ol := map[string]bool{}, map[string]bool{}
		for _, b := range svc.Backends {
			nw[b.String()] = true
		}
		for b := range model.Services[fes[i].String()].Backends {
			ol[b] = true
		}
		independent := true
		for j := range svcs {
			for b := range nw {
				if olds[j][b] {
					independent = false
				}
			}
			for b := range news[j] {
				if ol[b] {
					independent = false
				}
			}
		}
		if independent {
			svcs, news, olds = append(svcs, svc), append(news, nw), append(olds, ol)
		}
	}
	rs, err := e.UpsertBatch(ctx, svcs)
	if err != nil {
		return fmt.Errorf("upsert batch: %w", err)
	}
	for i, svc := range svcs {
		if err := checkUpsert(ctx, e, model, svc, rs[i].ID, rs[i].Created, rs[i].Err, errCount, nil); err != nil {
			return fmt.Errorf("upsert batch, service %d: %w", i, err)
		}
	}
	return nil
}

// deleteBatch deletes 2..3 frontends (present or not) with one DeleteBatch.
func deleteBatch(ctx context.Context, e *actorlb.Engine, model *Model, rng *rand.Rand, fes []lb.L3n4Addr, errCount *atomic.Int64) error {
	var pick []lb.L3n4Addr
	for _, i := range rng.Perm(len(fes))[:2+rng.IntN(2)] {
		pick = append(pick, fes[i])
	}
	as := chaosSource(pick[0]) // the others may be another source's: refused
	rs, err := e.DeleteBatchAs(ctx, as, pick)
	if err != nil {
		return fmt.Errorf("delete batch: %w", err)
	}
	for i, fe := range pick {
		if err := checkDelete(ctx, e, model, fe, as, rs[i].Err, errCount); err != nil {
			return fmt.Errorf("delete batch, frontend %d: %w", i, err)
		}
	}
	return nil
}

// checkUpsert checks the outcome of an upsert of svc against the model and
// records it there.
func checkUpsert(ctx context.Context, e *actorlb.Engine, model *Model, svc *lb.Service, id lb.ServiceID, created bool, err error, errCount *atomic.Int64, checkErr func(error) error) error {
	fe := svc.Frontend.L3n4Addr.String()
	old, had := model.Services[fe]
	if err != nil && checkErr != nil {
		if cerr := checkErr(err); cerr != nil {
			return cerr
		}
	}
	next := FromService(svc)
	if err == nil {
		if had && (created || id != old.ID) {
			return fmt.Errorf("upsert %s: created=%v id=%d, model had id %d", fe, created, id, old.ID)
		}
		next.ID = id
		model.Set(fe, next)
		return nil
	}
	errCount.Add(1)
	// An error: the service must be exactly the old version or the new.
	got, gerr := current(ctx, e, svc.Frontend.L3n4Addr)
	if gerr != nil {
		return fmt.Errorf("upsert %s failed (%v), then list: %w", fe, err, gerr)
	}
	switch {
	case got == nil && !had:
		return nil
	case got != nil && had && FromService(got).Equal(old):
		return nil
	case got != nil && FromService(got).Equal(next):
		next.ID = got.Frontend.ID
		model.Set(fe, next)
		return nil
	}
	return fmt.Errorf("upsert %s failed (%v) and left neither the old nor the new version: got %v", fe, err, got)
}

func del(ctx context.Context, e *actorlb.Engine, model *Model, fe lb.L3n4Addr, byID bool, errCount *atomic.Int64) error {
	old, had := model.Services[fe.String()]
	var err error
	as := lb.SourceAPI
	switch {
	case chaosSource(fe) != lb.SourceAPI:
		as = chaosSource(fe)
		var rs []actorlb.DeleteResult
		if rs, err = e.DeleteBatchAs(ctx, as, []lb.L3n4Addr{fe}); err == nil {
			err = rs[0].Err
		}
	case byID && had:
		err = e.Delete(ctx, old.ID)
	default:
		_, err = e.DeleteByFrontend(ctx, fe)
	}
	return checkDelete(ctx, e, model, fe, as, err, errCount)
}

// checkDelete checks the outcome of a delete of fe written by source as
// against the model and records it there.
func checkDelete(ctx context.Context, e *actorlb.Engine, model *Model, fe lb.L3n4Addr, as lb.Source, err error, errCount *atomic.Int64) error {
	old, had := model.Services[fe.String()]
	if owned := chaosSource(fe) != as; owned || errors.Is(err, actorlb.ErrFrontendOwned) {
		// Another source's service: refused, and left as it was.
		switch {
		case !owned:
			return fmt.Errorf("delete %s by its own source %s refused: %v", fe, as, err)
		case had && !errors.Is(err, actorlb.ErrFrontendOwned):
			return fmt.Errorf("delete of %s's %s by %s: want ErrFrontendOwned, got %v", chaosSource(fe), fe, as, err)
		case !had && err != nil && !errors.Is(err, actorlb.ErrServiceNotFound):
			return fmt.Errorf("delete of absent %s: %v", fe, err)
		case had:
			got, gerr := current(ctx, e, fe)
			if gerr != nil {
				return gerr
			}
			if got == nil || !FromService(got).Equal(old) {
				return fmt.Errorf("refused delete of %s changed it: %v", fe, got)
			}
		}
		return nil
	}
	switch {
	case !had && (err == nil || errors.Is(err, actorlb.ErrServiceNotFound)):
		// nil: the call was sent again after an engine restart and
		// reports success because the service is gone.
		return nil
	case !had:
		return fmt.Errorf("delete of absent %s: %v", fe, err)
	case err == nil:
		delete(model.Services, fe.String())
		return nil
	}
	errCount.Add(1)
	got, gerr := current(ctx, e, fe)
	if gerr != nil {
		return gerr
	}
	if got == nil {
		delete(model.Services, fe.String())
		return nil
	}
	if FromService(got).Equal(old) {
		return nil
	}
	return fmt.Errorf("delete %s failed (%v) and left a changed service %s", fe, err, FromService(got))
}

// runSync replaces everything with a variation of the union of all models.
func runSync(ctx context.Context, e *actorlb.Engine, rng *rand.Rand, pools [][]lb.Backend, models []*Model, syncMu *sync.RWMutex, errCount *atomic.Int64) error {
	syncMu.Lock()
	defer syncMu.Unlock()
	// One source's sync: the other source's services must not change.
	src := []lb.Source{lb.SourceAPI, lb.SourceKubernetes}[rng.IntN(2)]
	var desired []*lb.Service
	type owner struct {
		m  *Model
		fe string
	}
	var owners []owner
	for c, m := range models {
		// One version per backend across the client's desired services:
		// draw each backend's next state once.
		next := map[string]lb.BackendState{}
		for _, fe := range slices.Sorted(maps.Keys(m.Services)) {
			a, err := lb.ParseL3n4Addr(fe)
			if err != nil {
				return err
			}
			if chaosSource(a) != src || rng.IntN(4) == 0 {
				continue // another source's, or dropped by this sync
			}
			svc := randomService(rng, a, pools[c], m)
			for i, b := range svc.Backends {
				if st, ok := next[b.String()]; ok {
					svc.Backends[i].State = st
				} else {
					next[b.String()] = b.State
				}
			}
			desired = append(desired, svc)
			owners = append(owners, owner{m, fe})
		}
	}
	_, err := e.SyncSource(ctx, src, desired)
	list, lerr := e.List(ctx)
	if lerr != nil {
		return lerr
	}
	got := map[string]*lb.Service{}
	for _, s := range list {
		got[s.Frontend.L3n4Addr.String()] = s
	}
	if err != nil {
		errCount.Add(1)
		// Each service must be its old version or its new one (absent
		// for one the sync drops), nothing in between.
		next := map[string]*lb.Service{}
		for i, d := range desired {
			next[owners[i].fe] = d
		}
		for _, m := range models {
			for fe, old := range m.Services {
				g, d := got[fe], next[fe]
				if a, _ := lb.ParseL3n4Addr(fe); chaosSource(a) != src {
					// Its backends' states may have moved with the
					// sync's services (one state per backend).
					if g == nil || !sameSet(FromService(g), old) {
						return fmt.Errorf("sync of %s failed (%v) and changed %s of another source", src, err, fe)
					}
					m.Services[fe] = FromService(g)
					continue
				}
				// States may have moved with other services of the same
				// sync (one state per backend), so compare backend sets.
				switch {
				case g == nil && d == nil:
					delete(m.Services, fe)
				case g != nil && sameSet(FromService(g), old):
					m.Services[fe] = FromService(g)
				case g != nil && d != nil && sameSet(FromService(g), FromService(d)):
					m.Services[fe] = FromService(g)
				default:
					return fmt.Errorf("sync failed (%v) and left %s neither old (%s) nor new", err, fe, old)
				}
			}
		}
		return nil
	}
	mine := 0
	for _, s := range list {
		if s.Source == src {
			mine++
		}
	}
	if mine != len(desired) {
		return fmt.Errorf("sync of %s succeeded but the engine holds %d of its services, desired %d", src, mine, len(desired))
	}
	for _, m := range models {
		for fe, old := range m.Services {
			a, _ := lb.ParseL3n4Addr(fe)
			g := got[fe]
			switch {
			case chaosSource(a) == src:
				delete(m.Services, fe)
			case g == nil || !sameSet(FromService(g), old):
				return fmt.Errorf("sync of %s changed %s of another source: %v", src, fe, g)
			default:
				m.Services[fe] = FromService(g) // states may have moved with the sync
			}
		}
	}
	for i, d := range desired {
		g := got[owners[i].fe]
		if g == nil {
			return fmt.Errorf("sync succeeded without %s", owners[i].fe)
		}
		ms := FromService(d)
		ms.ID = g.Frontend.ID
		owners[i].m.Services[owners[i].fe] = ms
	}
	return nil
}

func sameSet(a, b ModelService) bool {
	if len(a.Backends) != len(b.Backends) {
		return false
	}
	for k := range a.Backends {
		if _, ok := b.Backends[k]; !ok {
			return false
		}
	}
	return true
}
