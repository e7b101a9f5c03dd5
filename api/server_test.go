package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// failingEngine answers every call with err (or panics with it). It tests
// the mapping of engine errors to status codes, which a real engine cannot
// be made to produce at will; the end-to-end tests in tests/agent drive a
// real one.
type failingEngine struct {
	err   error
	panic bool
	// deadline records whether every call had a deadline.
	noDeadline bool
}

func (f *failingEngine) fail(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		f.noDeadline = true
	}
	if f.panic {
		panic(f.err)
	}
	return f.err
}

func (f *failingEngine) Upsert(ctx context.Context, _ *lb.Service) (lb.ServiceID, bool, error) {
	return 0, false, f.fail(ctx)
}
func (f *failingEngine) UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]actorlb.UpsertResult, error) {
	err := f.fail(ctx)
	out := make([]actorlb.UpsertResult, len(svcs))
	for i := range out {
		out[i].Err = err // each service fails as the engine's single call would
	}
	return out, nil
}
func (f *failingEngine) Delete(ctx context.Context, _ lb.ServiceID) error { return f.fail(ctx) }
func (f *failingEngine) DeleteBatch(ctx context.Context, fes []lb.L3n4Addr) ([]actorlb.DeleteResult, error) {
	return nil, f.fail(ctx)
}
func (f *failingEngine) Get(ctx context.Context, _ lb.ServiceID) (*lb.Service, error) {
	return nil, f.fail(ctx)
}
func (f *failingEngine) List(ctx context.Context) ([]*lb.Service, error) { return nil, f.fail(ctx) }
func (f *failingEngine) RevNATDump(ctx context.Context) ([]actorlb.RevNAT, error) {
	return nil, f.fail(ctx)
}
func (f *failingEngine) Stats(ctx context.Context) (actorlb.Stats, error) {
	return actorlb.Stats{}, f.fail(ctx)
}
func (f *failingEngine) DumpMaps(ctx context.Context) (actorlb.MapEntries, error) {
	return actorlb.MapEntries{}, f.fail(ctx)
}
func (f *failingEngine) Reconcile(ctx context.Context) ([]actorlb.MapDrift, error) {
	return nil, f.fail(ctx)
}

func TestEngineErrorsToStatus(t *testing.T) {
	put := `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]}`
	transition := &lb.ValidationError{Field: "state", Value: "active", Reason: "cannot change from terminating to active", Err: lb.ErrInvalidStateTransition}
	cases := []struct {
		method, path, body string
		err                error
		code               int
	}{
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: write service: %w", actorlb.ErrMapFull), 500},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: %w", actorlb.ErrIDSpaceExhausted), 500},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: %w: x", actorlb.ErrServiceIDInUse), 460},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: %w: x", actorlb.ErrFrontendInUse), 460},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: backend 10.0.1.5:8080: %w", transition), 461},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: %w", &lb.ValidationError{Field: "frontend.port"}), 460},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: %w", &lb.ValidationError{Field: "backends[0].port"}), 461},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: %w", &lb.ValidationError{Field: "type"}), 400},
		{"PUT", "/v1/service/1", put, context.DeadlineExceeded, 500},
		{"GET", "/v1/service/1", "", fmt.Errorf("get service 1: %w", actorlb.ErrServiceNotFound), 404},
		{"GET", "/v1/service/1", "", actorlb.ErrClosed, 500},
		{"PUT", "/v1/service/1", put, fmt.Errorf("upsert service: %w: owned by kubernetes", actorlb.ErrFrontendOwned), 409},
		{"DELETE", "/v1/service/1", "", fmt.Errorf("delete service 1: %w: owned by kubernetes", actorlb.ErrFrontendOwned), 409},
		{"DELETE", "/v1/service/1", "", fmt.Errorf("delete service 1: %w", actorlb.ErrServiceNotFound), 404},
		{"DELETE", "/v1/service/1", "", fmt.Errorf("delete service 1: delete service: %w", maps.ErrInjected), 500},
		{"GET", "/v1/service", "", actorlb.ErrClosed, 500},
		{"GET", "/v1/lb/revnat", "", actorlb.ErrClosed, 500},
		{"GET", "/v1/lb/maps", "", actorlb.ErrClosed, 500},
		{"GET", "/v1/healthz", "", actorlb.ErrClosed, 503},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %s %v", tc.method, tc.path, tc.err), func(t *testing.T) {
			eng := &failingEngine{err: tc.err}
			log := logrus.New()
			log.SetOutput(io.Discard)
			s, err := NewServer(Config{Engine: eng, Log: logrus.NewEntry(log), CallTimeout: time.Minute})
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			require.False(t, eng.noDeadline, "every engine call has a deadline")
			if tc.path == "/v1/healthz" {
				var st Status
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
				require.Equal(t, "Failure", st.State)
				require.Equal(t, tc.err.Error(), st.Msg)
				return
			}
			var msg string
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &msg))
			require.Equal(t, tc.err.Error(), msg)
		})
	}
}

func TestHandlerPanicIs500(t *testing.T) {
	eng := &failingEngine{err: errors.New("boom"), panic: true}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := NewServer(Config{Engine: eng, Log: logrus.NewEntry(log)})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.JSONEq(t, `"internal error: boom (this is a bug; please report it)"`, rec.Body.String())
}

// PUT /v1/services answers 200 with one result per spec: what its own PUT
// would have answered (here the engine refuses every write: 500), and the
// specs refused before the engine with their validation status.
func TestPutServicesResults(t *testing.T) {
	eng := &failingEngine{err: fmt.Errorf("upsert service: write service: %w", actorlb.ErrMapFull)}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := NewServer(Config{Engine: eng, Log: logrus.NewEntry(log), CallTimeout: time.Minute})
	require.NoError(t, err)
	body := `[
		{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]},
		{"frontend-address": {"ip": "10.96.0.11", "port": 80}},
		{"id": 3, "frontend-address": {"ip": "10.96.0.12", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 0}]}
	]`
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/services", strings.NewReader(body)))
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var rs []BatchResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rs))
	require.Len(t, rs, 3)
	require.Equal(t, 500, rs[0].Code)
	require.Contains(t, rs[0].Error, "map full")
	require.Equal(t, StatusInvalidFrontend, rs[1].Code)
	require.Contains(t, rs[1].Error, "[1].id")
	require.Equal(t, StatusInvalidBackend, rs[2].Code, rs[2].Error)
	require.False(t, eng.noDeadline)

	// The batch answered 200, but /metrics counts its failed items as
	// failures (a full map used to count as "ok").
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Contains(t, rec.Body.String(), `actorlb_batch_items_total{operation="service_put_batch",result="error"} 1`)
	require.Contains(t, rec.Body.String(), `actorlb_batch_items_total{operation="service_put_batch",result="invalid"} 2`)

	for _, bad := range []string{`{"id": 1}`, `[{"id": 1, "bogus": true}]`, `[`} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/services", strings.NewReader(bad)))
		require.Equal(t, 400, rec.Code, bad)
	}
}

// statsEngine answers Stats with st and counts DumpMaps calls; everything
// else fails.
type statsEngine struct {
	failingEngine
	st    actorlb.Stats
	dumps int
}

func (f *statsEngine) Stats(context.Context) (actorlb.Stats, error) { return f.st, nil }
func (f *statsEngine) DumpMaps(ctx context.Context) (actorlb.MapEntries, error) {
	f.dumps++
	return actorlb.MapEntries{}, nil
}

// /v1/healthz and /metrics report each map's entries from the engine's
// Stats and read no map.
func TestHealthAndMetricsReadNoMap(t *testing.T) {
	eng := &statsEngine{failingEngine: failingEngine{err: errors.New("not called")}, st: actorlb.Stats{
		Ready: true, Services: 1,
		Maps: []actorlb.MapStats{
			{Name: maps.Service4Name, MaxEntries: 100, Entries: 3, Updated: 3},
			{Name: maps.Backend4Name, MaxEntries: 100, Entries: 2, Updated: 2, Deleted: 1},
		},
	}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := NewServer(Config{Engine: eng, Log: logrus.NewEntry(log)})
	require.NoError(t, err)

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var st Status
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
	require.Equal(t, []MapStatus{
		{Name: maps.Service4Name, Entries: 3, MaxEntries: 100, Fill: 0.03, Updated: 3},
		{Name: maps.Backend4Name, Entries: 2, MaxEntries: 100, Fill: 0.02, Updated: 2, Deleted: 1},
	}, st.Maps)

	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	for _, want := range []string{
		`actorlb_map_entries{map="lb4_services"} 3`,
		`actorlb_map_fill_ratio{map="lb4_backends"} 0.02`,
		`actorlb_map_writes_total{map="lb4_backends",op="delete"} 1`,
		`actorlb_up 1`,
	} {
		require.Contains(t, rec.Body.String(), want)
	}
	require.Zero(t, eng.dumps, "health and metrics dumped the maps")
}

// A pin removed under the agent, a full map and a failed reconcile each
// turn healthz to Warning (200: a probe must not restart the agent for
// them), naming the map and what to do; /metrics exposes pins and drift.
func TestHealthzWarnsOfAMissingPinAFullMapAndAFailedReconcile(t *testing.T) {
	eng := &statsEngine{failingEngine: failingEngine{err: errors.New("not called")}, st: actorlb.Stats{
		Ready: true,
		Maps: []actorlb.MapStats{
			{Name: maps.Service4Name, MaxEntries: 100, Entries: 3, Pin: "missing"},
			{Name: maps.Backend4Name, MaxEntries: 4, Entries: 4, Pin: "ok"},
		},
		Reconciles:         2,
		LastReconcileError: errors.New("reconcile maps: lb4_services: busy"),
		DriftRepairs:       map[string]map[string]uint64{maps.Backend4Name: {"missing": 3}},
	}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := NewServer(Config{Engine: eng, Log: logrus.NewEntry(log)})
	require.NoError(t, err)

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var st Status
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
	require.Equal(t, "Warning", st.State)
	require.Equal(t, "pin of lb4_services is missing: a restart would not find the map (the next reconcile re-pins it; actorlb bpf lb reconcile does it now); "+
		"lb4_backends is full (4 entries): raise --map-max (the maps are migrated at the next start); "+
		"last reconcile failed: reconcile maps: lb4_services: busy", st.Msg)
	require.Equal(t, uint64(3), st.Reconcile.Repairs[maps.Backend4Name]["missing"])

	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`actorlb_map_pin_ok{map="lb4_services"} 0`,
		`actorlb_map_pin_ok{map="lb4_backends"} 1`,
		`actorlb_drift_repairs_total{kind="missing",map="lb4_backends"} 3`,
		`actorlb_drift_repairs_total{kind="extra",map="lb4_services"} 0`,
		`actorlb_reconciles_total 2`,
	} {
		require.Contains(t, rec.Body.String(), want)
	}
}
