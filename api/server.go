package api

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Engine is what the server forwards to; *actorlb.Engine implements it.
type Engine interface {
	Upsert(ctx context.Context, svc *lb.Service) (lb.ServiceID, bool, error)
	UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]actorlb.UpsertResult, error)
	Delete(ctx context.Context, id lb.ServiceID) error
	DeleteBatch(ctx context.Context, frontends []lb.L3n4Addr) ([]actorlb.DeleteResult, error)
	Get(ctx context.Context, id lb.ServiceID) (*lb.Service, error)
	List(ctx context.Context) ([]*lb.Service, error)
	RevNATDump(ctx context.Context) ([]actorlb.RevNAT, error)
	Stats(ctx context.Context) (actorlb.Stats, error)
	DumpMaps(ctx context.Context) (actorlb.MapEntries, error)
	Reconcile(ctx context.Context) ([]actorlb.MapDrift, error)
}

var _ Engine = (*actorlb.Engine)(nil)

// Limits and timeouts of the server.
const (
	// DefaultMaxBodyBytes bounds a request body (1 MiB: some 15000
	// backends); a larger one gets 413 and is not read further.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultCallTimeout bounds each engine call a request makes.
	DefaultCallTimeout = 30 * time.Second
	// Server timeouts: headers must arrive within ReadHeaderTimeout, the
	// whole request within ReadTimeout, and the answer must be written
	// within WriteTimeout (more than DefaultCallTimeout); an idle
	// keep-alive connection is closed after IdleTimeout.
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 60 * time.Second
	WriteTimeout      = 2 * DefaultCallTimeout
	IdleTimeout       = 2 * time.Minute
	MaxHeaderBytes    = 64 << 10
	// DefaultMaxBatchSpecs bounds the specs of one PUT /v1/services; a
	// larger batch gets 413 and is not decoded further (the client splits
	// larger batches itself).
	DefaultMaxBatchSpecs = 1000
	// DefaultMaxHeavyRequests bounds the requests that may read a body or
	// build a large answer at the same time (PUT /v1/service/{id} and PUT
	// /v1/services with bodies over 64 KiB, GET /v1/service, GET
	// /v1/lb/revnat, GET /v1/lb/maps);
	// one more waits up to HeavyWait for a turn, then gets 429 with
	// Retry-After.
	DefaultMaxHeavyRequests = 4
	// HeavyWait is how long a heavy request waits for a turn.
	HeavyWait = time.Second
	// DefaultMaxConns bounds the open connections of each listener; the
	// next connection waits in the listen backlog until one closes.
	DefaultMaxConns = 128
)

// Config configures a Server.
type Config struct {
	// Engine serves every call (required).
	Engine Engine
	// Log receives request logs at debug level and failures at error
	// level (logrus.StandardLogger if nil).
	Log *logrus.Entry
	// BPFRoot is where the maps are pinned; DryRun says they are in memory.
	BPFRoot string
	DryRun  bool
	// MaxBodyBytes bounds request bodies (DefaultMaxBodyBytes if 0).
	MaxBodyBytes int64
	// CallTimeout bounds engine calls (DefaultCallTimeout if 0).
	CallTimeout time.Duration
	// SocketLB, if set, says what datapath is attached (one line for
	// /v1/healthz and `actorlb status`).
	SocketLB func() string
	// PacketLB, if set, says on which devices the packet datapath runs.
	PacketLB func() string
	// MaxBatchSpecs bounds the specs of one PUT /v1/services
	// (DefaultMaxBatchSpecs if 0).
	MaxBatchSpecs int
	// MaxHeavyRequests bounds the heavy requests served at once
	// (DefaultMaxHeavyRequests if 0).
	MaxHeavyRequests int
	// MaxConns bounds the open connections of each listener
	// (DefaultMaxConns if 0).
	MaxConns int
	// Token is the bearer token that every request on a TCP listener must
	// carry (Authorization: Bearer TOKEN). Requests on a unix socket need
	// none: the socket's permissions decide who may connect.
	Token string
	// Insecure allows serving TCP listeners without a Token.
	Insecure bool
	// NodePort, if set, is checked against every NodePort service written
	// (and reported by GET /v1/config); nil checks nothing.
	NodePort *NodePortConfig
	// Sources, if set, reports the sources that feed the engine besides
	// the API (/v1/healthz, `actorlb status`). Called per request.
	Sources func() []SourceStatus
	// ServiceName, if set, names the service a source programmed on a
	// frontend (the Kubernetes service's namespace and name), for the
	// answers of GET /v1/service.
	ServiceName func(lb.L3n4Addr) (namespace, name string, ok bool)
}

// NodePortConfig is what the agent allows NodePort frontends to be.
type NodePortConfig struct {
	// Range bounds the frontend port (--node-port-range;
	// lb.DefaultNodePortRange if zero).
	Range lb.PortRange
	// Addresses are the node's own addresses (--node-addresses): a
	// NodePort frontend is the surrogate (0.0.0.0 or ::) or one of them.
	Addresses []netip.Addr
}

// check refuses a NodePort service whose frontend port is outside the
// range or whose address is neither the surrogate nor a node address.
func (c *NodePortConfig) check(svc *lb.Service) error {
	if c == nil || svc.Type != lb.SVCTypeNodePort {
		return nil
	}
	fe := svc.Frontend.L3n4Addr
	if err := lb.ValidateNodePort(fe.Port, c.Range); err != nil {
		return &FieldError{Path: "frontend-address.port", Value: strconv.Itoa(int(fe.Port)),
			Reason: "a NodePort frontend's port must be in the agent's node port range " + c.Range.String() +
				" (pick a port in it, or start the agent with another --node-port-range)"}
	}
	if fe.IsSurrogate() || slices.Contains(c.Addresses, fe.Addr) {
		return nil
	}
	var same []string
	for _, a := range c.Addresses {
		if a.Is6() == fe.Addr.Is6() {
			same = append(same, a.String())
		}
	}
	surrogate := "0.0.0.0"
	if fe.Addr.Is6() {
		surrogate = "::"
	}
	have := "the agent has no node address of this family"
	if len(same) > 0 {
		have = "the node addresses are " + strings.Join(same, ", ")
	}
	return &FieldError{Path: "frontend-address.ip", Value: fe.Addr.String(),
		Reason: "a NodePort frontend must be the surrogate " + surrogate + " or one of the node's addresses (" + have +
			"): use one of those, give another type (ExternalIPs, LoadBalancer), or add the address to the agent's --node-addresses"}
}

// Server is the REST shim: every request becomes engine calls.
type Server struct {
	engine      Engine
	log         *logrus.Entry
	root        string
	dryRun      bool
	maxBody     int64
	callTimeout time.Duration
	socketLB    func() string
	packetLB    func() string
	sources     func() []SourceStatus
	serviceName func(lb.L3n4Addr) (string, string, bool)
	started     time.Time
	metrics     *metrics
	http        *http.Server
	closing     atomic.Bool
	maxBatch    int
	maxConns    int
	token       string
	insecure    bool
	heavy       chan struct{}
	release     *memRelease
	nodePort    *NodePortConfig

	mu     sync.Mutex
	listen []string
	// silent holds the connections that have not sent a request yet.
	silent map[net.Conn]struct{}
}

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI document of the API (served at
// /v1/openapi.json).
func OpenAPI() []byte { return slices.Clone(openAPI) }

// NewServer returns a server for cfg.Engine; call Serve to serve it.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("new api server: no engine")
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxBatchSpecs <= 0 {
		cfg.MaxBatchSpecs = DefaultMaxBatchSpecs
	}
	if cfg.MaxHeavyRequests <= 0 {
		cfg.MaxHeavyRequests = DefaultMaxHeavyRequests
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	s := &Server{
		engine: cfg.Engine, log: cfg.Log.WithField("component", "api"), root: cfg.BPFRoot, dryRun: cfg.DryRun,
		maxBody: cfg.MaxBodyBytes, callTimeout: cfg.CallTimeout, socketLB: cfg.SocketLB, packetLB: cfg.PacketLB, started: time.Now(),
		maxBatch: cfg.MaxBatchSpecs, maxConns: cfg.MaxConns, token: cfg.Token, insecure: cfg.Insecure,
		heavy: make(chan struct{}, cfg.MaxHeavyRequests), release: newMemRelease(), silent: map[net.Conn]struct{}{},
		sources: cfg.Sources, serviceName: cfg.ServiceName,
	}
	if cfg.NodePort != nil {
		np := *cfg.NodePort
		if np.Range == (lb.PortRange{}) {
			np.Range = lb.DefaultNodePortRange
		}
		np.Addresses = slices.Clone(np.Addresses)
		for i, a := range np.Addresses {
			np.Addresses[i] = a.Unmap()
		}
		s.nodePort = &np
	}
	if s.dryRun {
		s.root = ""
	}
	s.metrics = newMetrics(s)
	s.http = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnContext:       withConnInfo,
		ConnState:         s.trackConn,
	}
	s.http.RegisterOnShutdown(s.closeSilentConns)
	return s, nil
}

// Serve serves the API on l until Shutdown; it may be called for several
// listeners at once. It returns nil after Shutdown. A TCP listener needs
// Config.Token (or Config.Insecure): every request on it must carry the
// token and name a loopback host or the listener's address in its Host
// header. At most Config.MaxConns connections of l are open at once.
func (s *Server) Serve(l net.Listener) error {
	if l.Addr().Network() != "unix" && s.token == "" && !s.insecure {
		return fmt.Errorf("serve api on %s: %w", ListenURL(l.Addr()), ErrNoToken)
	}
	l = limitListener(l, s.maxConns)
	s.mu.Lock()
	s.listen = append(s.listen, ListenURL(l.Addr()))
	s.mu.Unlock()
	if err := s.http.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve api on %s: %w", ListenURL(l.Addr()), err)
	}
	return nil
}

// ListenURL returns the client's -H form of a listener address:
// unix:///path or http://IP:PORT.
func ListenURL(a net.Addr) string {
	if a.Network() == "unix" {
		return "unix://" + a.String()
	}
	return "http://" + a.String()
}

// Shutdown marks the agent unavailable (healthz answers 503), stops
// accepting connections, closes the idle ones and those that have not sent
// a request yet (net/http alone would wait up to 5 s for those), and waits
// for requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.release.stop()
	if err := s.http.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down api: %w", err)
	}
	return nil
}

// reply is what a handler answers: a status code and either a body to
// encode as JSON or an error whose message becomes a JSON string. A handler
// that wrote its answer itself sets written.
type reply struct {
	code    int
	body    any
	err     error
	written bool
	// retryAfter, if set, becomes the Retry-After header (seconds).
	retryAfter int
}

type handler func(w http.ResponseWriter, r *http.Request) reply

// routeTable lists every path and method the server answers, with the
// operation name used in metrics and logs.
var routeTable = []struct{ path, method, op string }{
	{"/v1/service", "GET", "service_list"},
	{"/v1/service/{id}", "GET", "service_get"},
	{"/v1/service/{id}", "PUT", "service_put"},
	{"/v1/service/{id}", "DELETE", "service_delete"},
	{"/v1/services", "PUT", "service_put_batch"},
	{"/v1/services", "DELETE", "service_delete_batch"},
	{"/v1/lb/revnat", "GET", "revnat_list"},
	{"/v1/lb/maps", "GET", "maps_dump"},
	{"/v1/lb/reconcile", "POST", "reconcile"},
	{"/v1/healthz", "GET", "healthz"},
	{"/v1/config", "GET", "config"},
	{"/v1/openapi.json", "GET", "openapi"},
	{"/metrics", "GET", "metrics"},
}

// Routes lists every path and its methods, sorted (for the OpenAPI
// consistency test).
func Routes() map[string][]string {
	out := map[string][]string{}
	for _, r := range routeTable {
		out[r.path] = append(out[r.path], r.method)
	}
	for _, ms := range out {
		slices.Sort(ms)
	}
	return out
}

// route is one path with a handler and an operation name per method.
type route struct {
	path    string
	methods map[string]handler
	ops     map[string]string
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler {
	metricsHandler := s.metrics.handler()
	byOp := map[string]handler{
		"service_list":         s.heavyOnly(s.listServices),
		"service_get":          s.getService,
		"service_put":          s.heavyOnly(s.putService),
		"service_delete":       s.deleteService,
		"service_put_batch":    s.heavyOnly(s.putServices),
		"service_delete_batch": s.heavyOnly(s.deleteServices),
		"revnat_list":          s.heavyOnly(s.listRevNAT),
		"maps_dump":            s.heavyOnly(s.dumpMaps),
		"reconcile":            s.heavyOnly(s.reconcile),
		"healthz":              s.healthz,
		"config":               s.config,
		"openapi":              s.openAPI,
		"metrics": func(w http.ResponseWriter, r *http.Request) reply {
			metricsHandler.ServeHTTP(w, r)
			return reply{written: true}
		},
	}
	routes := map[string]*route{}
	var paths []string
	for _, rt := range routeTable {
		r := routes[rt.path]
		if r == nil {
			r = &route{path: rt.path, methods: map[string]handler{}, ops: map[string]string{}}
			routes[rt.path] = r
			paths = append(paths, rt.path)
		}
		h, ok := byOp[rt.op]
		if !ok {
			panic("api: no handler for operation " + rt.op) // caught by every test
		}
		r.methods[rt.method] = h
		r.ops[rt.method] = rt.op
	}
	mux := http.NewServeMux()
	for _, p := range paths {
		mux.Handle(p, s.dispatch(*routes[p]))
	}
	mux.Handle("/", s.dispatch(route{path: "/"}))
	return s.guard(mux)
}

// statusRecorder remembers the status code a handler wrote itself.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (s *Server) dispatch(rt route) http.Handler {
	var allowed []string
	for m := range rt.methods {
		allowed = append(allowed, m)
	}
	slices.Sort(allowed)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() {
			// No panic reaches a client as a dropped connection.
			if p := recover(); p != nil {
				s.log.WithFields(logrus.Fields{"method": r.Method, "path": r.URL.Path, "panic": fmt.Sprint(p)}).Error("api handler panicked")
				writeError(w, http.StatusInternalServerError, fmt.Errorf("internal error: %v (this is a bug; please report it)", p))
			}
		}()
		h, ok := rt.methods[r.Method]
		var rep reply
		switch {
		case rt.path == "/":
			rep = reply{code: http.StatusNotFound, err: fmt.Errorf("no such path %s (see /v1/openapi.json)", r.URL.Path)}
		case !ok:
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			rep = reply{code: http.StatusMethodNotAllowed, err: fmt.Errorf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", "))}
		default:
			rec := &statusRecorder{ResponseWriter: w}
			rep = h(rec, r)
			if rep.written {
				rep.code = rec.code
			}
		}
		if rep.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(rep.retryAfter))
		}
		switch {
		case rep.written:
		case rep.err != nil:
			writeError(w, rep.code, rep.err)
		default:
			writeJSON(w, rep.code, rep.body)
		}
		d := time.Since(start)
		if op, ok := rt.ops[r.Method]; ok {
			s.metrics.observe(op, rep.code, d)
			if items, ok := rep.body.([]BatchResult); ok {
				s.metrics.observeItems(op, items)
			}
		}
		failed := rep.code >= 500 && rep.code != http.StatusServiceUnavailable
		if !failed && !s.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			return // the fields are not built for a line nobody logs
		}
		fields := logrus.Fields{"method": r.Method, "path": r.URL.Path, "status": rep.code, "duration": d.Round(time.Microsecond).String()} // with its unit, in JSON logs too
		switch {
		case failed:
			s.log.WithFields(fields).WithError(rep.err).Error("api request failed")
		case rep.err != nil:
			s.log.WithFields(fields).WithError(rep.err).Debug("api request refused")
		default:
			s.log.WithFields(fields).Debug("api request")
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if body != nil {
		_ = json.NewEncoder(w).Encode(body)
	}
}

// writeError writes err's message as a JSON string, as upstream does.
func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, err.Error())
}

func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.callTimeout)
}

// statusOfPath is the status code of an invalid field of a ServiceSpec.
func statusOfPath(path string) int {
	switch {
	case path == "id" || path == "frontend-address" || strings.HasPrefix(path, "frontend-address."):
		return StatusInvalidFrontend
	case strings.HasPrefix(path, "backend-addresses"):
		return StatusInvalidBackend
	}
	return http.StatusBadRequest
}

// invalid answers a *FieldError with the status of its path.
func invalid(err error) reply {
	var fe *FieldError
	if errors.As(err, &fe) {
		return reply{code: statusOfPath(fe.Path), err: err}
	}
	return reply{code: http.StatusBadRequest, err: err}
}

// engineError maps an engine error to a status code.
func engineError(err error, notFound int) reply {
	var ve *lb.ValidationError
	switch {
	case errors.Is(err, actorlb.ErrServiceNotFound) && notFound != 0:
		return reply{code: notFound, err: err}
	case errors.Is(err, lb.ErrInvalidStateTransition):
		return reply{code: StatusInvalidBackend, err: err}
	case errors.As(err, &ve) && ve.IsFrontend():
		return reply{code: StatusInvalidFrontend, err: err}
	case errors.As(err, &ve) && ve.IsBackend():
		return reply{code: StatusInvalidBackend, err: err}
	case errors.As(err, &ve):
		return reply{code: http.StatusBadRequest, err: err}
	case errors.Is(err, actorlb.ErrServiceIDInUse), errors.Is(err, actorlb.ErrFrontendInUse):
		return reply{code: StatusInvalidFrontend, err: err}
	case errors.Is(err, actorlb.ErrFrontendOwned):
		return reply{code: http.StatusConflict, err: err}
	}
	return reply{code: http.StatusInternalServerError, err: err}
}

// lookupID parses the {id} of a GET or DELETE: a decimal integer outside
// 1..65535 (0, negative, too large) names no service and gets 404, as the
// upstream v1.6 agent answers (its ID is an int64); anything else that is
// not an ID gets 400.
func lookupID(r *http.Request) (lb.ServiceID, reply, bool) {
	raw := r.PathValue("id")
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil && (n < 1 || n > int64(lb.MaxServiceID)) {
		return 0, reply{code: http.StatusNotFound, err: fmt.Errorf("service %s not found: %w (service IDs are 1..65535)", raw, actorlb.ErrServiceNotFound)}, false
	}
	id, err := pathID(r)
	if err != nil {
		return 0, reply{code: http.StatusBadRequest, err: err}, false
	}
	return id, reply{}, true
}

// pathID parses the {id} of the path.
func pathID(r *http.Request) (lb.ServiceID, error) {
	id, err := lb.ParseServiceID(r.PathValue("id"))
	if err != nil {
		return 0, fieldError("id", err)
	}
	return id, nil
}

// listServices streams the list: each service is converted and encoded
// on its own.
func (s *Server) listServices(w http.ResponseWriter, r *http.Request) reply {
	ctx, cancel := s.ctx(r)
	defer cancel()
	svcs, err := s.engine.List(ctx)
	if err != nil {
		return engineError(err, 0)
	}
	st := startStream(w)
	streamArray(st, len(svcs), func(i int) *Service { return s.named(NewService(svcs[i]), svcs[i]) })
	s.release.note(st.end())
	return reply{written: true}
}

func (s *Server) getService(_ http.ResponseWriter, r *http.Request) reply {
	id, rr, ok := lookupID(r)
	if !ok {
		return rr
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	svc, err := s.engine.Get(ctx, id)
	if err != nil {
		return engineError(err, http.StatusNotFound)
	}
	return reply{code: http.StatusOK, body: s.named(NewService(svc), svc)}
}

// named sets the namespace and name of out, the answer of svc, when a
// source names its frontend.
func (s *Server) named(out *Service, svc *lb.Service) *Service {
	if s.serviceName == nil || svc.Source == lb.SourceAPI {
		return out
	}
	if ns, name, ok := s.serviceName(svc.Frontend.L3n4Addr); ok {
		for _, spec := range []*ServiceSpec{out.Spec, out.Status.Realized} {
			spec.Flags.Namespace, spec.Flags.Name = ns, name
		}
	}
	return out
}

// Registerer is the registry of /metrics, where other parts of the agent
// (the Kubernetes source) register their metrics.
func (s *Server) Registerer() prometheus.Registerer { return s.metrics.reg }

func (s *Server) putService(w http.ResponseWriter, r *http.Request) reply {
	id, err := pathID(r)
	if err != nil {
		return reply{code: StatusInvalidFrontend, err: err}
	}
	var spec ServiceSpec
	if rr, ok := s.readJSON(w, r, &spec); !ok {
		return rr
	}
	svc, err := ToService(id, &spec)
	if err == nil {
		err = s.nodePort.check(svc)
	}
	if err != nil {
		return invalid(err)
	}
	for _, msg := range Warnings(svc) {
		w.Header().Add("Warning", `299 actorlb "`+msg+`"`)
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	_, created, err := s.engine.Upsert(ctx, svc)
	if err != nil {
		return engineError(err, 0)
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	if s.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		s.log.WithFields(logrus.Fields{"id": id, "frontend": svc.Frontend.L3n4Addr.String(), "backends": len(svc.Backends), "created": created}).Debug("service upserted")
	}
	got, err := s.engine.Get(ctx, id)
	if err != nil {
		// Deleted by a concurrent call already: answer with what was written.
		got = svc
	}
	return reply{code: code, body: NewService(got)}
}

// readJSON reads the request body (up to the limit) into dst, strictly;
// if it cannot, it returns the reply to send and false.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, dst any) (reply, bool) {
	s.release.note(r.ContentLength)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return reply{code: http.StatusRequestEntityTooLarge, err: &FieldError{Reason: fmt.Sprintf("larger than %d bytes", tooBig.Limit)}}, false
		}
		return reply{code: http.StatusBadRequest, err: &FieldError{Reason: "read: " + err.Error()}}, false
	}
	if err := decodeStrict(body, dst, s.maxBatch); err != nil {
		var tm *TooManyError
		if errors.As(err, &tm) {
			return reply{code: http.StatusRequestEntityTooLarge, err: err}, false
		}
		return invalid(err), false
	}
	return reply{}, true
}

// putServices creates or updates many services with one call (the engine's
// UpsertBatch): the body is an array of ServiceSpec, each with its "id";
// the answer (200) has one result per spec, in order, with the status a
// PUT /v1/service/{id} of that spec alone would have answered.
func (s *Server) putServices(w http.ResponseWriter, r *http.Request) reply {
	var specs []ServiceSpec
	if rr, ok := s.readJSON(w, r, &specs); !ok {
		return rr
	}
	results := make([]BatchResult, len(specs))
	var svcs []*lb.Service
	var idx []int
	for i := range specs {
		results[i].ID = specs[i].ID
		if specs[i].ID <= 0 || specs[i].ID > int64(lb.MaxServiceID) {
			rr := reply{code: StatusInvalidFrontend, err: &FieldError{Path: fmt.Sprintf("[%d].id", i), Value: strconv.FormatInt(specs[i].ID, 10), Reason: "service ID must be between 1 and 65535"}}
			results[i].Code, results[i].Error = rr.code, rr.err.Error()
			continue
		}
		svc, err := ToService(lb.ServiceID(specs[i].ID), &specs[i])
		if err == nil {
			err = s.nodePort.check(svc)
		}
		if err != nil {
			rr := invalid(err)
			results[i].Code, results[i].Error = rr.code, fmt.Sprintf("[%d]: %v", i, err)
			continue
		}
		results[i].Warnings = Warnings(svc)
		svcs, idx = append(svcs, svc), append(idx, i)
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	rs, err := s.engine.UpsertBatch(ctx, svcs)
	if err != nil {
		return engineError(err, 0)
	}
	created := 0
	for j, x := range rs {
		i := idx[j]
		switch {
		case x.Err != nil:
			rr := engineError(x.Err, 0)
			results[i].Code, results[i].Error, results[i].Warnings = rr.code, x.Err.Error(), nil
		case x.Created:
			results[i].Code = http.StatusCreated
			created++
		default:
			results[i].Code = http.StatusOK
		}
	}
	s.log.WithFields(logrus.Fields{"services": len(specs), "created": created}).Debug("service batch upserted")
	return reply{code: http.StatusOK, body: results}
}

func (s *Server) deleteService(_ http.ResponseWriter, r *http.Request) reply {
	id, rr, ok := lookupID(r)
	if !ok {
		return rr
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	if err := s.engine.Delete(ctx, id); err != nil {
		return engineError(err, http.StatusNotFound)
	}
	s.log.WithField("id", id).Debug("service deleted")
	return reply{code: http.StatusOK}
}

func (s *Server) listRevNAT(w http.ResponseWriter, r *http.Request) reply {
	ctx, cancel := s.ctx(r)
	defer cancel()
	es, err := s.engine.RevNATDump(ctx)
	if err != nil {
		return engineError(err, 0)
	}
	st := startStream(w)
	streamArray(st, len(es), func(i int) RevNATEntry {
		e := es[i]
		return RevNATEntry{ID: uint16(e.ID), IP: e.Address.Addr.String(), Port: e.Address.Port, Service: e.Service}
	})
	s.release.note(st.end())
	return reply{written: true}
}

// dumpMaps streams the six maps as a MapsDump: the entries read from the
// maps are sorted in place and converted one at a time.
func (s *Server) dumpMaps(w http.ResponseWriter, r *http.Request) reply {
	ctx, cancel := s.ctx(r)
	defer cancel()
	d, err := s.engine.DumpMaps(ctx)
	if err != nil {
		return reply{code: http.StatusInternalServerError, err: err}
	}
	st := startStream(w)
	st.raw(`{"root":`)
	st.value(s.root)
	for _, fam := range []struct {
		svc, be, rev string
		d4           bool
	}{{`,"lb4_services":`, `,"lb4_backends":`, `,"lb4_reverse_nat":`, true}, {`,"lb6_services":`, `,"lb6_backends":`, `,"lb6_reverse_nat":`, false}} {
		svcs, bes, revs := d.Services6, d.Backends6, d.RevNAT6
		if fam.d4 {
			svcs, bes, revs = d.Services4, d.Backends4, d.RevNAT4
		}
		sortServiceEntries(svcs)
		sortBackendEntries(bes)
		sortRevNATEntries(revs)
		st.raw(fam.svc)
		streamArray(st, len(svcs), func(i int) ServiceMapEntry { return serviceEntry(svcs[i]) })
		st.raw(fam.be)
		streamArray(st, len(bes), func(i int) BackendMapEntry { return backendEntry(bes[i]) })
		st.raw(fam.rev)
		streamArray(st, len(revs), func(i int) RevNATMapEntry { return revNATEntry(revs[i]) })
	}
	st.raw("}")
	s.release.note(st.end())
	return reply{written: true}
}

// Config returns what GET /v1/config answers.
func (s *Server) Config() *DaemonConfiguration {
	st := &DaemonConfigurationStatus{BPFRoot: s.root, DryRun: s.dryRun, NodeAddresses: []string{},
		Addressing: &NodeAddressing{IPv4: &NodeAddressingElement{}, IPv6: &NodeAddressingElement{}}}
	if np := s.nodePort; np != nil {
		st.NodePortRange, st.NodePortMin, st.NodePortMax = np.Range.String(), np.Range.Min, np.Range.Max
		for _, a := range np.Addresses {
			st.NodeAddresses = append(st.NodeAddresses, a.String())
			el := st.Addressing.IPv4
			if a.Is6() {
				el = st.Addressing.IPv6
			}
			el.Enabled = true
			if el.IP == "" && a.IsGlobalUnicast() {
				el.IP = a.String()
			}
		}
	}
	return &DaemonConfiguration{Spec: &DaemonConfigurationSpec{}, Status: st}
}

func (s *Server) config(_ http.ResponseWriter, _ *http.Request) reply {
	return reply{code: http.StatusOK, body: s.Config()}
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) reply {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI)
	return reply{written: true}
}

// status gathers the agent's figures: engine stats and the fill of every
// map (as the maps' owners count their entries: no map is read).
func (s *Server) status(ctx context.Context) (*Status, error) {
	st, err := s.engine.Stats(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	listen := slices.Clone(s.listen)
	s.mu.Unlock()
	// Unix sockets first, whatever order the listeners started in.
	rank := func(u string) int {
		if strings.HasPrefix(u, "unix:") {
			return 0
		}
		return 1
	}
	slices.SortFunc(listen, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b)) })
	out := &Status{
		State: "Ok", Ready: st.Ready, UptimeSeconds: time.Since(s.started).Seconds(),
		BPFRoot: s.root, DryRun: s.dryRun, Listen: listen,
		Services: st.Services, Backends: st.Backends, RevNAT: st.RevNAT,
		Restore: RestoreStatus{
			Services: st.Restore.Services, Backends: st.Restore.Backends, OrphanRevNAT: st.Restore.OrphanRevNAT,
			Repairs: st.Restore.Repairs, RepairsByKind: st.Restore.RepairsByKind, Writes: st.Restore.Writes,
		},
		ActorRestarts: st.ActorRestarts, OpsInFlight: st.OpsInFlight,
		Steps: make(map[string]StepStatus, len(st.Steps)),
	}
	for name, t := range st.Steps {
		out.Steps[name] = StepStatus{Count: t.Count, Seconds: t.Total.Seconds()}
	}
	if s.socketLB != nil {
		out.SocketLB = s.socketLB()
	}
	if s.packetLB != nil {
		out.PacketLB = s.packetLB()
	}
	if s.sources != nil {
		out.Sources = s.sources()
		if len(out.Sources) > 0 {
			// The sources' own counts: the engine does not count by source.
			out.ServicesBySource = map[string]int{}
			api := st.Services
			for _, src := range out.Sources {
				out.ServicesBySource[src.Name] += src.Frontends
				api -= src.Frontends
			}
			out.ServicesBySource[lb.SourceAPI.String()] = max(api, 0)
		}
	}
	out.Reconcile = ReconcileStatus{Runs: st.Reconciles, Repairs: st.DriftRepairs}
	out.UDPSockets = UDPSocketsStatus{Terminated: st.SocketsTerminated, Dropped: st.SocketTargetsDropped, Failures: st.SocketTerminateFailures}
	if st.LastSocketTerminateError != nil {
		out.UDPSockets.LastError = st.LastSocketTerminateError.Error()
	}
	if !st.LastReconcile.IsZero() {
		out.Reconcile.Last = st.LastReconcile.UTC().Format(time.RFC3339)
	}
	if st.LastReconcileError != nil {
		out.Reconcile.LastError = st.LastReconcileError.Error()
	}
	if out.Reconcile.Repairs == nil {
		out.Reconcile.Repairs = map[string]map[string]uint64{}
	}
	if out.Restore.RepairsByKind == nil {
		out.Restore.RepairsByKind = map[string]int{}
	}
	if out.ActorRestarts == nil {
		out.ActorRestarts = map[string]int{}
	}
	for _, m := range st.Maps {
		out.Maps = append(out.Maps, MapStatus{
			Name: m.Name, Entries: m.Entries, MaxEntries: m.MaxEntries, Fill: m.Fill(), Updated: m.Updated, Deleted: m.Deleted, Pin: m.Pin,
		})
	}
	return out, nil
}

func (s *Server) healthz(_ http.ResponseWriter, r *http.Request) reply {
	ctx, cancel := s.ctx(r)
	defer cancel()
	st, err := s.status(ctx)
	if err != nil {
		return reply{code: http.StatusServiceUnavailable, body: &Status{State: "Failure", Msg: err.Error()}}
	}
	switch {
	case s.closing.Load():
		st.State, st.Msg = "Failure", "shutting down"
	case !st.Ready:
		st.State, st.Msg = "Failure", "engine restoring from the maps"
	default:
		// Serving, but something needs an operator: 200 with Warning (a
		// probe must not restart the agent for it).
		if msg := warnings(st); msg != "" {
			st.State, st.Msg = "Warning", msg
		}
		return reply{code: http.StatusOK, body: st}
	}
	return reply{code: http.StatusServiceUnavailable, body: st}
}

// warnings says what in st needs an operator: a pin that no longer names
// its map, a full map, a failed reconcile ("" if nothing).
func warnings(st *Status) string {
	var ws []string
	for _, m := range st.Maps {
		if m.Pin != "" && m.Pin != "ok" && m.Pin != "unpinned" {
			ws = append(ws, fmt.Sprintf("pin of %s is %s: a restart would not find the map (the next reconcile re-pins it; actorlb bpf lb reconcile does it now)", m.Name, m.Pin))
		}
		if m.MaxEntries > 0 && m.Entries >= m.MaxEntries {
			ws = append(ws, fmt.Sprintf("%s is full (%d entries): raise --map-max (the maps are migrated at the next start)", m.Name, m.Entries))
		}
	}
	if st.Reconcile.LastError != "" {
		ws = append(ws, "last reconcile failed: "+st.Reconcile.LastError)
	}
	return strings.Join(ws, "; ")
}

// reconcile compares every map with what the engine wrote, and repairs.
func (s *Server) reconcile(_ http.ResponseWriter, r *http.Request) reply {
	ctx, cancel := s.ctx(r)
	defer cancel()
	ds, err := s.engine.Reconcile(ctx)
	out := make([]MapDrift, len(ds))
	for i, d := range ds {
		out[i] = MapDrift{Map: d.Map, Pin: d.Pin, Missing: d.Missing, Changed: d.Changed, Extra: d.Extra, Error: d.Error}
	}
	if err != nil && len(ds) == 0 {
		return reply{code: http.StatusInternalServerError, err: err}
	}
	code := http.StatusOK
	if err != nil {
		code = http.StatusInternalServerError // what was repaired is in the body
	}
	return reply{code: code, body: out}
}
