package source

import (
	"sync"

	"github.com/actorlb/actorlb/k8s/translate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
)

// Shared values of the endpoints' conditions: every cached endpoint points
// at these instead of three allocations of its own. Nothing writes
// through them (the cached objects are read-only).
var (
	condTrue  = true
	condFalse = false
)

func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &condTrue
	default:
		return &condFalse
	}
}

// trimObject returns the informers' transform for a source on the node
// nodeName: it drops from each object what neither the source nor the
// translation (package k8s/translate) reads, to keep the caches small,
// and shares what many objects repeat. It keeps every field that can
// change a translation: UID, resourceVersion, creationTimestamp, the
// labels the translation reads, the trigger-time annotation, the
// service's spec but its selector, target ports and app protocols, its
// load balancer status, the slices' address type, ports and per endpoint
// its first address (the only one the translation reads), conditions and
// whether it is on this node; of the Node its addresses. It is
// idempotent, and changes objects in place (client-go hands the
// transform freshly decoded objects).
func trimObject(nodeName string) cache.TransformFunc {
	node := &nodeName // shared by every endpoint on this node
	ns := &interner{m: map[string]string{}}
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Service:
			trimMeta(&o.ObjectMeta, ns, translate.LabelServiceProxyName)
			o.Spec.Selector = nil
			o.Spec.ExternalName = ""
			for i := range o.Spec.Ports {
				p := &o.Spec.Ports[i]
				p.TargetPort = intstr.IntOrString{}
				p.AppProtocol = nil
			}
			o.Status.Conditions = nil
		case *discoveryv1.EndpointSlice:
			trimMeta(&o.ObjectMeta, ns, discoveryv1.LabelServiceName, corev1.IsHeadlessService)
			for i := range o.Endpoints {
				e := &o.Endpoints[i]
				if len(e.Addresses) > 1 {
					clear(e.Addresses[1:])
					e.Addresses = e.Addresses[:1:1]
				}
				e.Conditions = discoveryv1.EndpointConditions{
					Ready: sharedBool(e.Conditions.Ready), Serving: sharedBool(e.Conditions.Serving),
					Terminating: sharedBool(e.Conditions.Terminating),
				}
				if e.NodeName != nil && *e.NodeName == nodeName {
					e.NodeName = node
				} else {
					e.NodeName = nil // the translation only asks whether it is this node
				}
				e.Hostname, e.TargetRef, e.DeprecatedTopology, e.Zone, e.Hints = nil, nil, nil, nil, nil
			}
			for i := range o.Ports {
				o.Ports[i].AppProtocol = nil
			}
			// The decoder grew these by doubling (10 endpoints of 96
			// bytes sit in room for 16): exact copies, the bulk of the
			// cache's memory.
			o.Endpoints = exact(o.Endpoints)
			o.Ports = exact(o.Ports)
		case *corev1.Node:
			trimMeta(&o.ObjectMeta, ns)
			o.Spec = corev1.NodeSpec{}
			o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses}
		case metav1.ObjectMetaAccessor:
			o.GetObjectMeta().SetManagedFields(nil)
		}
		return obj, nil
	}
}

// trimMeta keeps of m what the source reads: namespace (shared), name,
// UID, resourceVersion, creationTimestamp, the labels named keep and the
// trigger-time annotation.
// exact returns s in a new array of its length (nil if empty), if its
// array has room to spare.
func exact[T any](s []T) []T {
	if cap(s) == len(s) {
		return s
	}
	if len(s) == 0 {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

func trimMeta(m *metav1.ObjectMeta, ns *interner, keep ...string) {
	m.ManagedFields, m.OwnerReferences, m.Finalizers = nil, nil, nil
	m.GenerateName = ""
	m.Namespace = ns.get(m.Namespace)
	m.Labels = keepOnly(m.Labels, keep...)
	m.Annotations = keepOnly(m.Annotations, corev1.EndpointsLastChangeTriggerTime)
}

// keepOnly returns the entries of m named keep (nil if none), keyed by the
// constants (not per-object copies of the keys).
func keepOnly(m map[string]string, keep ...string) map[string]string {
	var out map[string]string
	for _, k := range keep {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keep))
			}
			out[k] = v
		}
	}
	return out
}

// interner shares the strings many objects repeat (namespaces): one copy
// each, up to maxInterned of them. The informers call the transform from
// their own goroutines.
type interner struct {
	mu sync.Mutex
	m  map[string]string
}

const maxInterned = 1 << 12

func (in *interner) get(s string) string {
	if s == "" {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}
