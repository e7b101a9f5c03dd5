package source

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/k8s/translate"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Target is what the source programs: the façade *actorlb.Engine
// satisfies it.
type Target interface {
	// SyncSource makes the services of src equal desired: upserts them and
	// deletes the other services of src, never touching another source's.
	SyncSource(ctx context.Context, src lb.Source, desired []*lb.Service) (actorlb.SyncResult, error)
	// UpsertBatch upserts services, one result per service, in order.
	UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]actorlb.UpsertResult, error)
	// DeleteBatchAs deletes the services of frontends as src, one result
	// per frontend, in order.
	DeleteBatchAs(ctx context.Context, src lb.Source, frontends []lb.L3n4Addr) ([]actorlb.DeleteResult, error)
}

// Defaults of Config.
const (
	DefaultDebounce       = 10 * time.Millisecond
	DefaultRetryMin       = 100 * time.Millisecond
	DefaultRetryMax       = 30 * time.Second
	DefaultResyncInterval = 5 * time.Minute
)

// Config configures a Source.
type Config struct {
	// Client reaches the apiserver. Required.
	Client kubernetes.Interface
	// NodeName is this node's name: endpoints on it are node-local, and,
	// without NodeAddresses, the Node whose addresses NodePort frontends
	// get. Default: the host name, lowercased (as the kubelet names the
	// node).
	NodeName string
	// NodeAddresses are the addresses NodePort frontends get besides the
	// surrogate. Nil: the InternalIP addresses of the Node named NodeName,
	// followed as they change (the Node is then watched too). Non-nil and
	// empty: none.
	NodeAddresses []netip.Addr
	// Target is what the source programs (an *actorlb.Engine). Required.
	Target Target
	// Logger receives the source's logs (logrus.StandardLogger if nil).
	Logger logrus.FieldLogger
	// Registerer gets the source's metrics (none registered if nil).
	Registerer prometheus.Registerer
	// Debounce is how long the source waits after an event, once synced,
	// before it applies everything pending (DefaultDebounce if 0).
	Debounce time.Duration
	// RetryMin and RetryMax bound the exponential backoff between retries
	// of failed calls (DefaultRetryMin and DefaultRetryMax if 0).
	RetryMin, RetryMax time.Duration
	// ResyncInterval is how often frontends refused as conflicts are tried
	// again (DefaultResyncInterval if 0; negative: only when their objects
	// change).
	ResyncInterval time.Duration
	// OnNodeAddresses, if set, is called with the Node's addresses each
	// time they change (only when NodeAddresses is nil: they come from the
	// Node), from the source's goroutine, before the NodePort frontends
	// are rewritten for them; the agent writes them to the datapath's
	// NodePort fallback map. It must not block for long.
	OnNodeAddresses func([]netip.Addr)
	// NoHugePages turns off the transparent huge pages Run asks for the
	// heap its lists and the full sync are about to fill (SyncHugePages).
	NoHugePages bool
}

// Source feeds the Kubernetes cluster's Services and EndpointSlices to a
// Target, as kube-proxy does. See the package documentation.
type Source struct {
	cfg     Config
	log     logrus.FieldLogger
	m       *metrics
	in      *inbox
	running atomic.Bool
	start   time.Time // set by Run before the informers start

	lastEvent atomic.Int64 // unix nanoseconds
	connected atomic.Bool
	warned    atomic.Bool // an apiserver failure was logged

	// kinds is the number of kinds watched; answered and failing (guarded
	// by mu) the kinds whose list/watch calls worked once, and those whose
	// last call failed.
	kinds    int
	answered map[string]bool
	failing  map[string]bool

	mu     sync.RWMutex // guards status and names
	status Status
	names  map[lb.L3n4Addr]string
}

// Status is the source's state, as Source.Status reports it.
type Status struct {
	NodeName string
	// NodeAddresses are the addresses NodePort frontends get.
	NodeAddresses []netip.Addr
	// Connected: the last list or watch of every informer worked.
	Connected bool
	// LastError is the last list/watch error, at LastErrorTime.
	LastError     string
	LastErrorTime time.Time
	// Synced: every informer listed its objects and the full
	// reconciliation was applied; from then on changes are applied as they
	// come.
	Synced bool
	// LastEvent is when the last event was received.
	LastEvent time.Time
	// Services and Frontends count the Kubernetes services the source
	// holds frontends of, and those frontends; Pending the frontends (and
	// services not yet translated) still to apply.
	Services, Frontends, Pending int
	// Conflicts are the frontends the source cannot program.
	Conflicts []Conflict
	// LastSync is when the last change was applied, which took
	// LastSyncDuration; LastApplyError is the last failure to apply (empty
	// once a later change applied cleanly).
	LastSync         time.Time
	LastSyncDuration time.Duration
	LastApplyError   string
}

// New checks cfg and returns a Source ready to Run.
func New(cfg Config) (*Source, error) {
	bad := func(field, why string) error {
		return fmt.Errorf("new kubernetes source: %w: %s: %s", ErrInvalidConfig, field, why)
	}
	if cfg.Client == nil {
		return nil, bad("Client", "required")
	}
	if cfg.Target == nil {
		return nil, bad("Target", "required")
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return nil, bad("NodeName", fmt.Sprintf("not given and the host name is unknown (%v)", err))
		}
		cfg.NodeName = strings.ToLower(h)
	}
	for i, a := range cfg.NodeAddresses {
		if !a.IsValid() || a.Zone() != "" || a.Unmap().IsUnspecified() {
			return nil, bad(fmt.Sprintf("NodeAddresses[%d]", i), fmt.Sprintf("%q is not a usable node address", a))
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"Debounce", &cfg.Debounce, DefaultDebounce}, {"RetryMin", &cfg.RetryMin, DefaultRetryMin}, {"RetryMax", &cfg.RetryMax, DefaultRetryMax}} {
		if *d.v < 0 {
			return nil, bad(d.name, "must not be negative")
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.RetryMin > cfg.RetryMax {
		return nil, bad("RetryMin", fmt.Sprintf("%s is above RetryMax %s", cfg.RetryMin, cfg.RetryMax))
	}
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new kubernetes source: %w", err)
	}
	s := &Source{
		cfg:   cfg,
		log:   cfg.Logger.WithField("source", "kubernetes"),
		m:     m,
		in:    newInbox(),
		names: map[lb.L3n4Addr]string{},
		kinds: 2, answered: map[string]bool{}, failing: map[string]bool{},
	}
	if cfg.NodeAddresses == nil {
		s.kinds = 3
	}
	s.status.NodeName = cfg.NodeName
	s.status.NodeAddresses = normAddrs(cfg.NodeAddresses)
	return s, nil
}

// Status returns the source's state. It is safe for concurrent use.
func (s *Source) Status() Status {
	s.mu.RLock()
	st := s.status
	st.Conflicts = slices.Clone(st.Conflicts)
	st.NodeAddresses = slices.Clone(st.NodeAddresses)
	s.mu.RUnlock()
	st.Connected = s.connected.Load()
	if t := s.lastEvent.Load(); t != 0 {
		st.LastEvent = time.Unix(0, t)
	}
	return st
}

// Name returns the Kubernetes service ("namespace/name") that the source
// programmed on frontend. It is safe for concurrent use.
func (s *Source) Name(frontend lb.L3n4Addr) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.names[frontend]
	return n, ok
}

// informerSet is what Run starts and waits for.
type informerSet struct {
	factories []informers.SharedInformerFactory
	synced    []cache.DoneChecker
	informers map[string]cache.SharedIndexInformer // by kind
	node      bool                                 // the Node is watched
}

// proxyLabelSelector leaves out what kube-proxy leaves out: services
// another proxy handles, and the slices of headless services.
const proxyLabelSelector = "!" + translate.LabelServiceProxyName + ",!" + corev1.IsHeadlessService

// UseProtobuf makes a client of rc talk protobuf to the apiserver, as
// kube-proxy does by default (its --kube-api-content-type): the initial
// lists of Services, EndpointSlices and Nodes decode faster and with less
// garbage than JSON. JSON stays accepted (the apiserver answers in JSON
// what has no protobuf form).
func UseProtobuf(rc *rest.Config) {
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}

// listWatch is an informer's list and watch calls for one kind.
type listWatch struct {
	obj   runtime.Object
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
	tweak func(*metav1.ListOptions)
}

// observed returns the constructor of an informer for lw whose every list
// and watch call reports its outcome to the source: that is what
// Status().Connected follows (client-go retries a refused connection
// itself, without telling its watch error handler).
func (s *Source) observed(kind string, lw listWatch) func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
	return func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		l := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				lw.tweak(&o)
				obj, err := lw.list(ctx, o)
				s.observe(ctx, kind, "list", err)
				return obj, err
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				lw.tweak(&o)
				w, err := lw.watch(ctx, o)
				s.observe(ctx, kind, "watch", err)
				return w, err
			},
		}
		l.ListFunc = func(o metav1.ListOptions) (runtime.Object, error) {
			return l.ListWithContextFunc(context.Background(), o)
		}
		l.WatchFunc = func(o metav1.ListOptions) (watch.Interface, error) {
			return l.WatchFuncWithContext(context.Background(), o)
		}
		return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(l, client), lw.obj,
			cache.SharedIndexInformerOptions{ResyncPeriod: resync})
	}
}

func (s *Source) informers() (*informerSet, error) {
	set := &informerSet{informers: map[string]cache.SharedIndexInformer{}}
	c := s.cfg.Client
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTransform(trimObject(s.cfg.NodeName)))
	set.factories = append(set.factories, f)
	proxied := func(o *metav1.ListOptions) { o.LabelSelector = proxyLabelSelector }
	add := func(kind string, lw listWatch, h cache.ResourceEventHandler) error {
		inf := f.InformerFor(lw.obj, s.observed(kind, lw))
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			s.watchError(ctx, kind, err)
		}); err != nil {
			return fmt.Errorf("run: %s informer: %w", kind, err)
		}
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("run: %s informer: %w", kind, err)
		}
		set.synced = append(set.synced, reg.HasSyncedChecker())
		set.informers[kind] = inf
		return nil
	}
	svcs := c.CoreV1().Services(metav1.NamespaceAll)
	if err := add(KindService, listWatch{
		obj:  &corev1.Service{},
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return svcs.List(ctx, o) },
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return svcs.Watch(ctx, o)
		},
		tweak: proxied,
	}, cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { s.onService(OpAdd, obj, initial) },
		UpdateFunc: func(_, obj any) { s.onService(OpUpdate, obj, false) },
		DeleteFunc: func(obj any) { s.onService(OpDelete, obj, false) },
	}); err != nil {
		return nil, err
	}
	sls := c.DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
	if err := add(KindEndpointSlice, listWatch{
		obj:  &discoveryv1.EndpointSlice{},
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return sls.List(ctx, o) },
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return sls.Watch(ctx, o)
		},
		tweak: proxied,
	}, cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { s.onSlice(OpAdd, obj, initial) },
		UpdateFunc: func(_, obj any) { s.onSlice(OpUpdate, obj, false) },
		DeleteFunc: func(obj any) { s.onSlice(OpDelete, obj, false) },
	}); err != nil {
		return nil, err
	}
	if s.cfg.NodeAddresses == nil {
		set.node = true
		nodes := c.CoreV1().Nodes()
		if err := add(KindNode, listWatch{
			obj:  &corev1.Node{},
			list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) },
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return nodes.Watch(ctx, o)
			},
			tweak: func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.cfg.NodeName).String()
			},
		}, cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, _ bool) { s.onNode(OpAdd, obj) },
			UpdateFunc: func(_, obj any) { s.onNode(OpUpdate, obj) },
			DeleteFunc: func(obj any) { s.onNode(OpDelete, obj) },
		}); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// received notes that an event arrived.
func (s *Source) received(kind, op string, now time.Time) {
	s.m.event(kind, op)
	s.lastEvent.Store(now.UnixNano())
}

// trigger returns when the change of an object with annotations ann was
// made, as kube-proxy reads it: its last-change-trigger-time annotation
// when present (ignored if older than the source), else the event's
// receipt, except for the initial list (not a change).
func (s *Source) trigger(ann map[string]string, initial bool, now time.Time) time.Time {
	if v, ok := ann[corev1.EndpointsLastChangeTriggerTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			if t.After(s.start) {
				return t
			}
			return time.Time{}
		}
	}
	if initial {
		return time.Time{}
	}
	return now
}

// unwrap returns the object of a delete event, which may be a tombstone,
// and the tombstone's key.
func unwrap(obj any) (any, string) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj, t.Key
	}
	return obj, ""
}

func (s *Source) onService(op string, obj any, initial bool) {
	now := time.Now()
	obj, tkey := unwrap(obj)
	svc, ok := obj.(*corev1.Service)
	if op == OpDelete {
		k, ok := deletedKey(svc, ok && svc != nil, tkey)
		if !ok {
			s.log.WithField("object", fmt.Sprintf("%T", obj)).Warn("kubernetes: service delete event without a service")
			return
		}
		s.received(KindService, op, now)
		s.in.putService(k, nil, now)
		return
	}
	if !ok || svc == nil {
		s.log.WithField("object", fmt.Sprintf("%T", obj)).Warn("kubernetes: service event without a service")
		return
	}
	s.received(KindService, op, now)
	s.in.putService(Key{svc.Namespace, svc.Name}, svc, s.trigger(svc.Annotations, initial, now))
}

// deletedKey is the key of a deleted object: from the object, else from
// its tombstone's key.
func deletedKey[T metav1.Object](obj T, ok bool, tkey string) (Key, bool) {
	if ok {
		return Key{obj.GetNamespace(), obj.GetName()}, true
	}
	if ns, name, err := cache.SplitMetaNamespaceKey(tkey); err == nil && name != "" {
		return Key{ns, name}, true
	}
	return Key{}, false
}

func (s *Source) onSlice(op string, obj any, initial bool) {
	now := time.Now()
	obj, tkey := unwrap(obj)
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if op == OpDelete {
		k, ok := deletedKey(es, ok && es != nil, tkey)
		if !ok {
			s.log.WithField("object", fmt.Sprintf("%T", obj)).Warn("kubernetes: endpointslice delete event without a slice")
			return
		}
		s.received(KindEndpointSlice, op, now)
		s.in.putSlice(objID{k.Namespace, k.Name}, nil, now)
		return
	}
	if !ok || es == nil {
		s.log.WithField("object", fmt.Sprintf("%T", obj)).Warn("kubernetes: endpointslice event without a slice")
		return
	}
	s.received(KindEndpointSlice, op, now)
	s.in.putSlice(objID{es.Namespace, es.Name}, es, s.trigger(es.Annotations, initial, now))
}

func (s *Source) onNode(op string, obj any) {
	now := time.Now()
	obj, tkey := unwrap(obj)
	s.received(KindNode, op, now)
	if op == OpDelete {
		n, ok := obj.(*corev1.Node)
		if k, ok := deletedKey(n, ok && n != nil, tkey); ok && k.Name == s.cfg.NodeName {
			s.in.putNode(nodeEvent{deleted: true})
		}
		return
	}
	n, ok := obj.(*corev1.Node)
	if !ok || n == nil {
		s.log.WithField("object", fmt.Sprintf("%T", obj)).Warn("kubernetes: node event without a node")
		return
	}
	if n.Name != s.cfg.NodeName {
		return // the field selector should have left it out
	}
	s.in.putNode(nodeEvent{addrs: InternalIPs(n)})
}

// InternalIPs returns the node's InternalIP addresses, in order, without
// the unparsable ones.
func InternalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Zone() == "" {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// observe records the outcome of a list or watch call of kind: the source
// is connected when the last call of every kind worked.
func (s *Source) observe(ctx context.Context, kind, call string, err error) {
	if ctx.Err() != nil {
		return // stopping: not the apiserver's doing
	}
	now := time.Now()
	s.mu.Lock()
	was := s.connected.Load()
	if err == nil {
		delete(s.failing, kind)
		s.answered[kind] = true
	} else {
		s.failing[kind] = true
		s.status.LastError = kind + " " + call + ": " + err.Error()
		s.status.LastErrorTime = now
	}
	is := len(s.failing) == 0 && len(s.answered) == s.kinds
	s.connected.Store(is)
	s.mu.Unlock()
	switch {
	case err != nil && (was || !s.warned.Swap(true)):
		s.log.WithFields(logrus.Fields{"kind": kind, "call": call}).WithError(err).
			Warn("kubernetes: apiserver unreachable or refusing; retrying (the maps keep serving what was applied)")
	case err == nil && is && !was && s.warned.Load():
		s.log.Info("kubernetes: apiserver reachable again")
	}
}

// watchError records an error that ended a list/watch (client-go retries).
func (s *Source) watchError(ctx context.Context, kind string, err error) {
	if ctx.Err() != nil || err == nil {
		return
	}
	s.mu.Lock()
	s.status.LastError = kind + ": " + err.Error()
	s.status.LastErrorTime = time.Now()
	s.mu.Unlock()
	s.log.WithField("kind", kind).WithError(err).Warn("kubernetes: list/watch ended with an error; retrying")
}
