package source

import (
	"slices"
	"testing"

	"github.com/actorlb/actorlb/k8s/translate"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// richService is a LoadBalancer service with every field the cache trims
// and every one the translation reads.
func richService() *corev1.Service {
	s := service("ns", "web", "10.96.0.1", nodePort(30080), externalIPs("198.18.1.1"))
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.ResourceVersion = "7"
	s.Labels = map[string]string{"app": "web", "team": "x"}
	s.Annotations = map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": `{"a":"very long"}`,
		corev1.EndpointsLastChangeTriggerTime:              "2026-01-02T03:04:05Z",
	}
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	s.OwnerReferences = []metav1.OwnerReference{{Name: "owner"}}
	s.Spec.Selector = map[string]string{"app": "web"}
	s.Spec.Ports[0].TargetPort = intstr.FromString("http")
	s.Spec.Ports[0].AppProtocol = ptr("http")
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.2.1"}, {Hostname: "lb.example"}}
	s.Status.Conditions = []metav1.Condition{{Type: "x"}}
	return s
}

func richSlice() *discoveryv1.EndpointSlice {
	sl := sliceOf("ns", "web-1", "web",
		ep("10.0.0.1", testNode, "r"), ep("10.0.0.2", "node-b", "t"), ep("10.0.0.3", "", "n"), ep("10.0.0.4", testNode, ""))
	sl.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-02T03:04:05Z", "other": "x"}
	sl.Ports[0].AppProtocol = ptr("http")
	for i := range sl.Endpoints {
		e := &sl.Endpoints[i]
		e.Addresses = append(e.Addresses, "10.1.0.9")
		e.Hostname = ptr("h")
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "ns", UID: "u"}
		e.Zone = ptr("z")
		e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}}
		e.DeprecatedTopology = map[string]string{"k": "v"}
	}
	return sl
}

// The caches keep what the translation reads: trimmed objects translate
// exactly as the originals, on this node and on another.
func TestTrimKeepsTheTranslation(t *testing.T) {
	svc, sl := richService(), richSlice()
	for _, node := range []string{testNode, "node-b", ""} {
		in := translate.Input{Service: svc, Slices: []*discoveryv1.EndpointSlice{sl}, NodeName: node, NodeAddresses: addrs("198.18.0.1")}
		want := translate.Translate(in)
		require.NotEmpty(t, want.Services)

		trim := trimObject(node)
		ts, err := trim(svc.DeepCopy())
		require.NoError(t, err)
		tsl, err := trim(sl.DeepCopy())
		require.NoError(t, err)
		in.Service, in.Slices = ts.(*corev1.Service), []*discoveryv1.EndpointSlice{tsl.(*discoveryv1.EndpointSlice)}
		got := translate.Translate(in)
		require.Equal(t, renderAll(want.Services), renderAll(got.Services), "node %q", node)
		require.Equal(t, want.Skipped, got.Skipped, "node %q", node)
	}
}

// What the cache keeps of the objects: no managedFields, annotations but
// the trigger time, other labels, selector, endpoint details; trimming is
// idempotent.
func TestTrimDropsWhatNothingReads(t *testing.T) {
	trim := trimObject(testNode)
	o, err := trim(richService())
	require.NoError(t, err)
	svc := o.(*corev1.Service)
	require.Nil(t, svc.ManagedFields)
	require.Nil(t, svc.OwnerReferences)
	require.Nil(t, svc.Labels)
	require.Equal(t, map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-02T03:04:05Z"}, svc.Annotations)
	require.Nil(t, svc.Spec.Selector)
	require.Equal(t, intstr.IntOrString{}, svc.Spec.Ports[0].TargetPort)
	require.Equal(t, "7", svc.ResourceVersion)
	again, err := trim(svc.DeepCopy())
	require.NoError(t, err)
	require.Equal(t, svc, again)

	rich := richSlice()
	rich.Endpoints, rich.Ports = slices.Grow(rich.Endpoints, 6), slices.Grow(rich.Ports, 3) // as a decoder grows them
	o, err = trim(rich)
	require.NoError(t, err)
	sl := o.(*discoveryv1.EndpointSlice)
	require.Equal(t, map[string]string{discoveryv1.LabelServiceName: "web"}, sl.Labels)
	require.Equal(t, map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-02T03:04:05Z"}, sl.Annotations)
	for i, e := range sl.Endpoints {
		require.Len(t, e.Addresses, 1, "endpoint %d", i)
		require.Nil(t, e.TargetRef, "endpoint %d", i)
		require.Nil(t, e.Hints, "endpoint %d", i)
		require.Nil(t, e.Zone, "endpoint %d", i)
		require.Nil(t, e.Hostname, "endpoint %d", i)
		require.Nil(t, e.DeprecatedTopology, "endpoint %d", i)
	}
	require.Equal(t, testNode, *sl.Endpoints[0].NodeName)
	require.Nil(t, sl.Endpoints[1].NodeName, "another node: only whether it is this one matters")
	require.Same(t, sl.Endpoints[0].Conditions.Ready, sl.Endpoints[1].Conditions.Serving, "shared condition values")
	require.Equal(t, len(sl.Endpoints), cap(sl.Endpoints), "endpoints in an array of their number")
	require.Equal(t, len(sl.Ports), cap(sl.Ports), "ports in an array of their number")
	again, err = trim(sl.DeepCopy())
	require.NoError(t, err)
	require.Equal(t, sl, again)

	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"a": "b"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}},
			Images:    []corev1.ContainerImage{{Names: []string{"big"}}},
		},
	}
	o, err = trim(n)
	require.NoError(t, err)
	require.Equal(t, addrs("198.18.0.1"), InternalIPs(o.(*corev1.Node)))
	require.Nil(t, o.(*corev1.Node).Status.Images)
}
