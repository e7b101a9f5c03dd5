package source

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

// informerAccess is what the source asks of the apiserver: list and watch,
// by API group and resource. requireOnlyListWatch and the ClusterRole of
// deploy/ are checked against it.
var informerAccess = map[string][]string{
	"":                 {"nodes", "services"},
	"discovery.k8s.io": {"endpointslices"},
}

// requireOnlyListWatch checks that the source asked client nothing but
// list and watch of the resources of informerAccess (the test's own
// writes aside): kube-proxy's RBAC, no get of single objects.
func requireOnlyListWatch(t *testing.T, client *fake.Clientset) {
	t.Helper()
	for _, a := range client.Actions() {
		switch a.GetVerb() {
		case "create", "update", "delete":
			continue // the test's own
		case "list", "watch":
		default:
			t.Fatalf("the source asked %s %s", a.GetVerb(), a.GetResource())
		}
		r := a.GetResource()
		require.Contains(t, informerAccess[r.Group], r.Resource, "%s of %s", a.GetVerb(), r)
		if l, ok := a.(k8stesting.ListAction); ok && r.Resource != "nodes" {
			sel := l.GetListRestrictions().Labels.String()
			require.Contains(t, sel, "!service.kubernetes.io/service-proxy-name", "kube-proxy's selector")
			require.Contains(t, sel, "!service.kubernetes.io/headless", "kube-proxy's selector")
		}
	}
}

// splitYAML returns the documents of a multi-document YAML file.
func splitYAML(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var docs [][]byte
	for _, d := range strings.Split(string(b), "\n---\n") {
		docs = append(docs, []byte(d))
	}
	return docs
}

// The ClusterRole of deploy/rbac.yaml grants exactly list and watch of
// what the informers read, bound to the DaemonSet's service account.
func TestDeployRBACIsListAndWatchOnly(t *testing.T) {
	docs := splitYAML(t, "../../deploy/rbac.yaml")
	require.Len(t, docs, 3)
	var sa corev1.ServiceAccount
	require.NoError(t, yaml.UnmarshalStrict(docs[0], &sa))
	var role rbacv1.ClusterRole
	require.NoError(t, yaml.UnmarshalStrict(docs[1], &role))
	var binding rbacv1.ClusterRoleBinding
	require.NoError(t, yaml.UnmarshalStrict(docs[2], &binding))

	got := map[string][]string{}
	for _, r := range role.Rules {
		require.Equal(t, []string{"list", "watch"}, r.Verbs, "rule %+v", r)
		require.Empty(t, r.ResourceNames)
		for _, g := range r.APIGroups {
			got[g] = append(got[g], r.Resources...)
		}
	}
	for g := range got {
		slices.Sort(got[g])
	}
	require.Equal(t, informerAccess, got)
	require.Equal(t, role.Name, binding.RoleRef.Name)
	require.Equal(t, "ClusterRole", binding.RoleRef.Kind)
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}, binding.Subjects)

	var ds appsv1.DaemonSet
	require.NoError(t, yaml.UnmarshalStrict(splitYAML(t, "../../deploy/daemonset.yaml")[0], &ds))
	spec := ds.Spec.Template.Spec
	require.Equal(t, sa.Name, spec.ServiceAccountName)
	require.Equal(t, sa.Namespace, ds.Namespace)
	require.True(t, spec.HostNetwork)
	c := spec.Containers[0]
	require.True(t, *c.SecurityContext.Privileged)
	require.Contains(t, c.Args, "--k8s-in-cluster")
	require.Contains(t, c.Args, "--k8s-node-name=$(NODE_NAME)")
	var bpf bool
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/sys/fs/bpf" {
			bpf = true
			require.Equal(t, corev1.MountPropagationBidirectional, *m.MountPropagation)
		}
	}
	require.True(t, bpf, "the BPF filesystem is mounted")
}
