package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RequireEnv names the variable that turns the skip for missing binaries
// into a failure (.ci/run sets it; the same as the privileged tests').
const RequireEnv = "ACTORLB_REQUIRE_PRIVILEGED"

// StartTimeout bounds the start of a cluster by Start and Shared.
const StartTimeout = 3 * time.Minute

// Start starts a cluster for tb and stops it when tb ends (however it
// ends). Without the binaries it skips tb, or fails it under
// ACTORLB_REQUIRE_PRIVILEGED=1. When tb fails, the tails of both logs are
// logged.
func Start(tb testing.TB, opts ...Options) *Cluster {
	tb.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	requireBinaries(tb)
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := New(ctx, o)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			logTails(tb, c)
		}
		if err := c.Close(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return c
}

var shared struct {
	mu  sync.Mutex
	c   *Cluster
	err error
}

// Shared returns the cluster shared by the tests of the package, starting
// it on first use; RunShared, called from TestMain, stops it. Tests on it
// work in their own Namespace and must not stop the apiserver.
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	requireBinaries(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		shared.c, shared.err = New(ctx, Options{})
		cancel()
	}
	if shared.err != nil {
		tb.Fatalf("shared cluster: %v", shared.err)
	}
	c := shared.c
	tb.Cleanup(func() {
		if tb.Failed() {
			logTails(tb, c)
		}
	})
	return c
}

// RunShared runs the tests of m and then stops the shared cluster, if a
// test started it. Use it as TestMain's body: os.Exit(cluster.RunShared(m)).
func RunShared(m *testing.M) int {
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c != nil {
		if err := shared.c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "shared cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.c = nil
	}
	return code
}

func requireBinaries(tb testing.TB) {
	tb.Helper()
	_, err := FindBinaries()
	if err == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("kube test cannot run: %v (%s=1 forbids skipping)", err, RequireEnv)
	}
	tb.Skipf("kube test skipped: %v (set %s=1 to fail instead)", err, RequireEnv)
}

func logTails(tb testing.TB, c *Cluster) {
	tb.Helper()
	for _, name := range []string{"etcd", "apiserver"} {
		tb.Logf("%s log (last lines):\n%s", name, c.LogTail(name, 40))
	}
}

// Namespace creates a namespace of its own for tb and, when tb ends,
// deletes the Services and EndpointSlices in it and then the namespace
// (without a controller manager nothing else would: a deleted namespace
// keeps its objects). Nothing is deleted from a cluster closed by then.
func (c *Cluster) Namespace(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(tb.Name())},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("create namespace: %v", err)
	}
	name := ns.Name
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.deleteNamespace(ctx, name); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return name
}

func (c *Cluster) deleteNamespace(ctx context.Context, name string) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil // the test closed the cluster: nothing left to delete
	}
	var errs []error
	svcs, err := c.Client.CoreV1().Services(name).List(ctx, metav1.ListOptions{})
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, s := range svcs.Items {
			if err := c.Client.CoreV1().Services(name).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if err := c.Client.DiscoveryV1().EndpointSlices(name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		errs = append(errs, err)
	}
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}

// namespacePrefix makes a DNS label prefix from a test name.
func namespacePrefix(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	p := strings.Trim(b.String(), "-")
	if p == "" {
		p = "test"
	}
	return p + "-"
}
