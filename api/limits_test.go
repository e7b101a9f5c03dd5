package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

func quietLog() *logrus.Entry {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return logrus.NewEntry(log)
}

// newTestServer returns a server for eng with cfg's limits.
func newTestServer(t testing.TB, eng Engine, cfg Config) *Server {
	t.Helper()
	cfg.Engine, cfg.Log = eng, quietLog()
	s, err := NewServer(cfg)
	require.NoError(t, err)
	return s
}

// serveOn serves s on l until the test ends.
func serveOn(t testing.TB, s *Server, l net.Listener) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		require.NoError(t, <-done)
	})
}

func emptyBatch(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("{},", n), ",") + "]"
}

func TestBatchOverTheSpecLimitIs413NamingTheLimit(t *testing.T) {
	s := newTestServer(t, &failingEngine{err: errors.New("not called")}, Config{MaxBatchSpecs: 10, CallTimeout: time.Minute})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/services", strings.NewReader(emptyBatch(11))))
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	var msg string
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &msg))
	require.Equal(t, "invalid request body: more than 10 services in one request (the limit of PUT /v1/services; split the batch)", msg)

	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/services", strings.NewReader(emptyBatch(10))))
	require.Equal(t, http.StatusOK, rec.Code, "a batch at the limit is served")
}

// A 1 MiB body of empty specs used to be decoded whole (a tree of 350,000
// maps, then as many error results: tens of MB per request). Decoding
// stops at the limit now.
func TestDecodingAOneMiBBatchOfEmptySpecsAllocatesLittle(t *testing.T) {
	body := []byte(emptyBatch((DefaultMaxBodyBytes - 2) / 3))
	require.LessOrEqual(t, len(body), DefaultMaxBodyBytes)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var specs []ServiceSpec
	err := decodeStrict(body, &specs, DefaultMaxBatchSpecs)
	runtime.ReadMemStats(&after)
	var tm *TooManyError
	require.ErrorAs(t, err, &tm)
	require.Equal(t, DefaultMaxBatchSpecs, tm.Limit)
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(8<<20), "decoding allocated %d bytes", allocated)
}

// blockingEngine's List waits until release is closed.
type blockingEngine struct {
	failingEngine
	entered chan struct{}
	release chan struct{}
}

func (b *blockingEngine) List(ctx context.Context) ([]*lb.Service, error) {
	b.entered <- struct{}{}
	<-b.release
	return nil, nil
}

func TestHeavyRequestBeyondTheLimitGets429WithRetryAfter(t *testing.T) {
	eng := &blockingEngine{failingEngine: failingEngine{err: errors.New("not called")}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := newTestServer(t, eng, Config{MaxHeavyRequests: 1})
	first := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service", nil))
		first <- rec.Code
	}()
	<-eng.entered

	rec := httptest.NewRecorder()
	start := time.Now()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/lb/maps", nil))
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.GreaterOrEqual(t, time.Since(start), HeavyWait, "it waited for a turn first")
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "busy: 1 large requests")

	// Light requests are not held back: a GET of one service, a small PUT.
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service/0", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/service/1", strings.NewReader(`{"frontend-address": {"ip": "10.96.0.1", "port": 80}}`)))
	require.Equal(t, http.StatusInternalServerError, rec.Code, "served (the engine fails it): %s", rec.Body.String())
	big := `{"frontend-address": {"ip": "10.96.0.1", "port": 80}, "backend-addresses": [` +
		strings.TrimSuffix(strings.Repeat(`{"ip": "10.0.0.1", "port": 1},`, lightBody/29+1), ",") + `]}`
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/service/1", strings.NewReader(big)))
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "a large PUT waits for a slot")

	close(eng.release)
	require.Equal(t, http.StatusOK, <-first)
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service", nil))
	require.Equal(t, http.StatusOK, rec.Code, "the slot is free again")
}

// okEngine answers Stats (ready) and List; everything else fails.
type okEngine struct {
	failingEngine
}

func (*okEngine) Stats(context.Context) (actorlb.Stats, error) {
	return actorlb.Stats{Ready: true}, nil
}
func (*okEngine) List(context.Context) ([]*lb.Service, error) { return nil, nil }

// rawGet sends GET path to addr over network with the Host and
// Authorization headers given, and returns the status and body.
func rawGet(t testing.TB, network, addr, host, auth, path string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	_, err = io.WriteString(c, req+"\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestTCPRequestWithoutTheTokenIs401AndUnixNeedsNone(t *testing.T) {
	s := newTestServer(t, &okEngine{}, Config{Token: "s3cret-token"})
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "s.sock")
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	serveOn(t, s, tl)
	serveOn(t, s, ul)
	addr := tl.Addr().String()

	code, body := rawGet(t, "tcp", addr, addr, "", "/v1/healthz")
	require.Equal(t, http.StatusUnauthorized, code, body)
	require.JSONEq(t, `"API token required on TCP (Authorization: Bearer TOKEN; see --api-token-file)"`, body)
	code, body = rawGet(t, "tcp", addr, addr, "Bearer wrong", "/v1/healthz")
	require.Equal(t, http.StatusUnauthorized, code, body)
	require.JSONEq(t, `"wrong API token"`, body)
	code, body = rawGet(t, "tcp", addr, addr, "Bearer s3cret-token", "/v1/healthz")
	require.Equal(t, http.StatusOK, code, body)
	code, _ = rawGet(t, "tcp", addr, "localhost", "bearer s3cret-token", "/v1/service")
	require.Equal(t, http.StatusOK, code, "the scheme is case-insensitive, localhost is a loopback name")
	code, body = rawGet(t, "unix", sock, "actorlb", "", "/v1/healthz")
	require.Equal(t, http.StatusOK, code, "the unix socket needs no token: %s", body)

	// The Go client sends the token.
	c, err := NewClient("http://"+addr, WithToken("s3cret-token"))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Health(context.Background())
	require.NoError(t, err)
	c2, err := NewClient("http://" + addr)
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Health(context.Background())
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusUnauthorized, se.Code)
}

// A page in a browser on the node whose DNS name was rebound to 127.0.0.1
// reaches the TCP listener with its own name in Host: refused.
func TestTCPRequestForAForeignHostIs403(t *testing.T) {
	s := newTestServer(t, &okEngine{}, Config{Insecure: true})
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, s, tl)
	addr := tl.Addr().String()
	for _, host := range []string{"evil.example", "evil.example:" + strings.Split(addr, ":")[1], "10.0.0.1", "0.0.0.0"} {
		code, body := rawGet(t, "tcp", addr, host, "", "/v1/healthz")
		require.Equal(t, http.StatusForbidden, code, host)
		require.Contains(t, body, "forbidden Host header", host)
	}
	for _, host := range []string{addr, "127.0.0.1", "localhost:1", "[::1]:80", "127.1.2.3"} {
		code, body := rawGet(t, "tcp", addr, host, "", "/v1/healthz")
		require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
	}
}

func TestHostAllowed(t *testing.T) {
	for _, tc := range []struct {
		host, local string
		ok          bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"LOCALHOST", "127.0.0.1:8080", true},
		{"[::1]", "[::1]:8080", true},
		{"10.1.2.3:8080", "10.1.2.3:8080", true},
		{"10.1.2.3", "10.1.2.3:8080", true},
		{"10.1.2.4:8080", "10.1.2.3:8080", false},
		{"0.0.0.0:8080", "0.0.0.0:8080", false},
		{"", "127.0.0.1:8080", false},
		{"example.com", "127.0.0.1:8080", false},
	} {
		require.Equal(t, tc.ok, hostAllowed(tc.host, tc.local), "%q on %q", tc.host, tc.local)
	}
}

func TestServingTCPWithoutATokenIsRefused(t *testing.T) {
	s := newTestServer(t, &okEngine{}, Config{})
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tl.Close()
	err = s.Serve(tl)
	require.ErrorIs(t, err, ErrNoToken)
}

func TestConnectionsBeyondTheCapWaitForAFreeSlot(t *testing.T) {
	s := newTestServer(t, &okEngine{}, Config{MaxConns: 2})
	sock := filepath.Join(t.TempDir(), "s.sock")
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	serveOn(t, s, ul)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("unix", sock)
		require.NoError(t, err)
		held = append(held, c)
	}
	third, err := net.Dial("unix", sock) // queued in the backlog
	require.NoError(t, err)
	defer third.Close()
	_, err = io.WriteString(third, "GET /v1/healthz HTTP/1.1\r\nHost: actorlb\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, third.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	var one [1]byte
	_, err = third.Read(one[:])
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a third connection was served while two were open")

	held[0].Close()
	require.NoError(t, third.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	held[1].Close()
}

// net/http answers requests it cannot read itself, in plain text; the
// agent's listeners turn those answers into the API's JSON string.
func TestLowLevelHTTPErrorsAreJSONStrings(t *testing.T) {
	s := newTestServer(t, &okEngine{}, Config{})
	sock := filepath.Join(t.TempDir(), "s.sock")
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	serveOn(t, s, ul)
	for _, tc := range []struct {
		name, req string
		code      int
		msg       string
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", 400, "invalid HTTP request: Bad Request: malformed request line or headers"},
		{"no Host header", "GET /v1/healthz HTTP/1.1\r\n\r\n", 400, "invalid HTTP request: Bad Request: missing required Host header"},
		{"headers too large", "GET /v1/healthz HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", MaxHeaderBytes+8192) + "\r\n\r\n", 431,
			"invalid HTTP request: Request Header Fields Too Large"},
		{"unknown transfer encoding", "PUT /v1/services HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501,
			"invalid HTTP request: Unsupported transfer encoding"},
		{"HTTP version", "GET /v1/healthz HTTP/9.9\r\nHost: a\r\n\r\n", 505, "invalid HTTP request: HTTP Version Not Supported: unsupported protocol version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", sock)
			require.NoError(t, err)
			defer c.Close()
			go func() { _, _ = io.WriteString(c, tc.req) }()
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.code, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			var msg string
			require.NoError(t, json.Unmarshal(b, &msg), "%s", b)
			require.Equal(t, tc.msg, msg)
		})
	}
}

func TestGetAndDeleteOfServiceZeroOrNegativeIs404(t *testing.T) {
	s := newTestServer(t, &failingEngine{err: errors.New("not called")}, Config{})
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/v1/service/0", 404}, {"/v1/service/-1", 404}, {"/v1/service/-9223372036854775808", 404}, {"/v1/service/65536", 404},
		{"/v1/service/abc", 400}, {"/v1/service/1.5", 400}, {"/v1/service/99999999999999999999", 400},
	} {
		for _, method := range []string{"GET", "DELETE"} {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(method, tc.path, nil))
			require.Equal(t, tc.code, rec.Code, "%s %s: %s", method, tc.path, rec.Body.String())
		}
	}
}

// The upstream v1.6 `cilium service update` sends
// "flags": {"direct-server-return": true} by default (its --rev): there
// it means "add the revNAT entry", which actorlb always does.
func TestV16DirectServerReturnFlagIsAccepted(t *testing.T) {
	var spec ServiceSpec
	require.NoError(t, decodeStrict([]byte(`{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80, "protocol": "TCP"},
		"backend-addresses": [{"ip": "10.0.1.5", "port": 8080}], "flags": {"direct-server-return": true}}`), &spec))
	svc, err := ToService(1, &spec)
	require.NoError(t, err)
	plain, err := ToService(1, &ServiceSpec{FrontendAddress: spec.FrontendAddress, BackendAddresses: spec.BackendAddresses})
	require.NoError(t, err)
	require.Equal(t, plain, svc, "the flag changes nothing")
	require.Nil(t, FromService(svc).Flags.DirectServerReturn, "answers leave it out")

	f := false
	_, err = ToService(1, &ServiceSpec{FrontendAddress: spec.FrontendAddress, Flags: &ServiceFlags{DirectServerReturn: &f}})
	require.EqualError(t, err, `invalid flags.direct-server-return "false": actorlb always creates the revNAT entry with the service (what true means in upstream v1.6); leave the flag out or set it true`)
	require.Equal(t, http.StatusBadRequest, invalid(err).code)
}

// mapsEngine answers DumpMaps with unsorted entries and List with svcs.
type mapsEngine struct {
	failingEngine
	d    actorlb.MapEntries
	svcs []*lb.Service
}

func (m *mapsEngine) DumpMaps(context.Context) (actorlb.MapEntries, error) {
	// A fresh copy each time, as the engine's dump is.
	return actorlb.MapEntries{Services4: append([]maps.ServiceEntry(nil), m.d.Services4...), Backends4: append([]maps.BackendEntry(nil), m.d.Backends4...),
		RevNAT6: append([]maps.RevNATEntry(nil), m.d.RevNAT6...)}, nil
}
func (m *mapsEngine) List(context.Context) ([]*lb.Service, error) { return m.svcs, nil }

func TestStreamedAnswersEqualTheWholeDocuments(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	eng := &mapsEngine{failingEngine: failingEngine{err: errors.New("not called")}, d: actorlb.MapEntries{
		Services4: []maps.ServiceEntry{
			{Key: maps.ServiceKey{Address: a("10.96.0.11"), Port: 80, Proto: 6, Slot: 1}, Value: maps.ServiceValue{BackendID: 2}},
			{Key: maps.ServiceKey{Address: a("10.96.0.10"), Port: 80, Proto: 6}, Value: maps.ServiceValue{Count: 1, RevNATIndex: 1}},
		},
		Backends4: []maps.BackendEntry{{ID: 9, Value: maps.BackendValue{Address: a("10.0.0.9"), Port: 1}}, {ID: 2, Value: maps.BackendValue{Address: a("10.0.0.2"), Port: 1}}},
		RevNAT6:   []maps.RevNATEntry{{ID: 3, Value: maps.RevNATValue{Address: a("fd00::3"), Port: 3}}},
	}}
	for i := range 3 {
		svc, err := ToService(lb.ServiceID(i+1), &ServiceSpec{FrontendAddress: &FrontendAddress{IP: "10.96.0.1", Port: uint16(80 + i)},
			BackendAddresses: []BackendAddress{{IP: "10.0.0.1", Port: 1}}})
		require.NoError(t, err)
		eng.svcs = append(eng.svcs, svc)
	}
	s := newTestServer(t, eng, Config{BPFRoot: "/sys/fs/bpf/x"})

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/lb/maps", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	want, err := json.Marshal(NewMapsDump("/sys/fs/bpf/x", eng.d))
	require.NoError(t, err)
	require.JSONEq(t, string(want), rec.Body.String())

	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var list []*Service
	for _, svc := range eng.svcs {
		list = append(list, NewService(svc))
	}
	want, err = json.Marshal(list)
	require.NoError(t, err)
	require.JSONEq(t, string(want), rec.Body.String())

	eng.svcs = nil
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service", nil))
	require.JSONEq(t, `[]`, rec.Body.String(), "an empty list is an empty array")
}

// A connection that never sent a request used to hold Shutdown for up to
// 5 s (net/http waits that long for it): the agent stopped slowly when a
// client had just connected.
func TestShutdownDoesNotWaitForConnectionsThatSentNothing(t *testing.T) {
	s := newTestServer(t, &okEngine{}, Config{})
	sock := filepath.Join(t.TempDir(), "s.sock")
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ul) }()
	idle, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer idle.Close()
	code, _ := rawGet(t, "unix", sock, "actorlb", "", "/v1/healthz") // the server is serving
	require.Equal(t, http.StatusOK, code)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, s.Shutdown(ctx))
	require.NoError(t, <-done)
	require.Less(t, time.Since(start), time.Second, "Shutdown waited for a connection that sent nothing")
}

func TestClientRetriesBusyAnswersAfterRetryAfter(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls < 3 {
			w.Header().Set("Retry-After", "0")
			writeError(w, http.StatusTooManyRequests, errors.New("busy"))
			return
		}
		writeJSON(w, http.StatusOK, []*Service{})
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL)
	require.NoError(t, err)
	defer c.Close()
	list, err := c.ListServices(context.Background())
	require.NoError(t, err)
	require.Empty(t, list)
	require.Equal(t, 3, calls)
}

func TestClientSplitsBatchesAtTheLimit(t *testing.T) {
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var specs []ServiceSpec
		if err := json.NewDecoder(r.Body).Decode(&specs); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		sizes = append(sizes, len(specs))
		out := make([]BatchResult, len(specs))
		for i, s := range specs {
			out[i] = BatchResult{ID: s.ID, Code: http.StatusCreated}
		}
		writeJSON(w, http.StatusOK, out)
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL, WithBatchSize(2))
	require.NoError(t, err)
	defer c.Close()
	specs := make([]ServiceSpec, 5)
	for i := range specs {
		specs[i].ID = int64(i + 1)
	}
	rs, err := c.PutServices(context.Background(), specs)
	require.NoError(t, err)
	require.Equal(t, []int{2, 2, 1}, sizes)
	require.Len(t, rs, 5)
	for i, r := range rs {
		require.Equal(t, int64(i+1), r.ID)
	}
	sizes = nil
	rs, err = c.PutServices(context.Background(), nil)
	require.NoError(t, err)
	require.Empty(t, rs)
	require.Equal(t, []int{0}, sizes, "an empty batch is one request")
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), mode))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	tok, err := ReadTokenFile(write("ok", "  abc123  \nsecond line\n", 0o600))
	require.NoError(t, err)
	require.Equal(t, "abc123", tok)
	_, err = ReadTokenFile(write("group", "abc\n", 0o640))
	require.NoError(t, err, "group-readable is fine")
	_, err = ReadTokenFile(write("world", "abc\n", 0o644))
	require.ErrorContains(t, err, "every user may read it")
	_, err = ReadTokenFile(write("empty", "\n", 0o600))
	require.ErrorContains(t, err, "empty token")
}

// The memory of a burst is given back after the last heavy request of the
// burst ends, not after the first: one still writing a large answer would
// keep its buffers, and nothing would give them back later.
func TestMemoryIsGivenBackAfterTheLastHeavyRequestOfABurst(t *testing.T) {
	m := newMemRelease()
	t.Cleanup(m.stop)
	m.begin()            // A
	m.begin()            // B
	m.note(releaseAbove) // A wrote a large answer
	m.done()             // A ends, B still writes
	m.mu.Lock()
	require.Nil(t, m.timer, "released while a heavy request still runs")
	m.mu.Unlock()
	m.done() // B ends: the burst is over
	m.mu.Lock()
	require.NotNil(t, m.timer, "the burst's memory is never given back")
	m.mu.Unlock()

	// Small requests alone plan nothing.
	n := newMemRelease()
	t.Cleanup(n.stop)
	n.begin()
	n.note(releaseAbove - 1)
	n.done()
	n.mu.Lock()
	require.Nil(t, n.timer)
	n.mu.Unlock()
}
