package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The address ranges of the test cluster. The apiserver allocates
// ClusterIPs from the service ranges; tests take endpoint, node and
// external addresses from the endpoint ranges. All lie in the ranges set
// aside for benchmarking (198.18.0.0/15, 2001:2::/48), which the apiserver
// accepts where it refuses loopback.
const (
	ServiceCIDRv4  = "198.19.0.0/16"
	ServiceCIDRv6  = "2001:2:0:1::/108"
	EndpointCIDRv4 = "198.18.0.0/16"
	EndpointCIDRv6 = "2001:2::/64"
)

// stopGrace is how long a process may take to stop after SIGTERM.
const stopGrace = 30 * time.Second

// Options tune a Cluster; the zero value is the default.
type Options struct {
	// APIServerArgs are extra kube-apiserver flags (e.g. --feature-gates=...).
	APIServerArgs []string
	// Fsync makes etcd fsync as it would in production; by default it
	// does not (the store lives as long as the test).
	Fsync bool
}

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Dir holds both processes' state and logs (etcd.log, apiserver.log).
	Dir string
	// URL is the apiserver's https://127.0.0.1:PORT, the same across
	// restarts; EtcdURL is etcd's client URL. Like the fields below, they
	// are set by New and never change.
	URL, EtcdURL string
	// Kubeconfig is the admin's kubeconfig file, Config and Client the
	// admin's client (client-side rate limit off).
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	// AgentKubeconfig and AgentConfig authenticate as the user
	// actorlb-agent, who has no rights until a test binds some.
	AgentKubeconfig string
	AgentConfig     *rest.Config

	bins Binaries
	opts Options
	port int

	mu        sync.Mutex
	etcd      *proc
	apiserver *proc // nil while stopped
	closed    bool
}

// New starts etcd and then the apiserver in a new temporary directory and
// returns when the apiserver is ready, or when ctx ends. The caller must
// Close the cluster.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	bins, err := FindBinaries()
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	dir, err := os.MkdirTemp("", "actorlb-kube-")
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	c := &Cluster{Dir: dir, bins: bins, opts: opts}
	if err := c.start(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	etcdArgs := []string{"--dir", filepath.Join(c.Dir, "etcd")}
	if !c.opts.Fsync {
		etcdArgs = append(etcdArgs, "--unsafe-no-fsync")
	}
	etcd, etcdURL, err := startProc(ctx, "etcd", c.bins.Etcd, etcdArgs, filepath.Join(c.Dir, "etcd.log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd, c.EtcdURL = etcd, etcdURL
	c.mu.Unlock()

	if err := c.StartAPIServer(ctx); err != nil {
		return err
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("apiserver address %q: %w", c.URL, err)
	}
	_, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("apiserver address %q: %w", c.URL, err)
	}
	if c.port, err = strconv.Atoi(portStr); err != nil {
		return fmt.Errorf("apiserver address %q: %w", c.URL, err)
	}

	apiDir := filepath.Join(c.Dir, "apiserver")
	c.Kubeconfig = filepath.Join(apiDir, "admin.kubeconfig")
	c.AgentKubeconfig = filepath.Join(apiDir, "agent.kubeconfig")
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	c.Config.QPS = -1 // no client-side rate limit: tests and benchmarks write in bulk
	if c.AgentConfig, err = clientcmd.BuildConfigFromFlags("", c.AgentKubeconfig); err != nil {
		return fmt.Errorf("agent kubeconfig: %w", err)
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return c.WaitReady(ctx)
}

// WaitReady polls the apiserver's /readyz until it answers ok, or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	var last error
	for {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = err
		if last == nil {
			last = fmt.Errorf("answer %q", body)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for /readyz: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StartAPIServer starts the apiserver, on the address it had before if it
// ran before, and returns once it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("start apiserver: %w", ErrClosed)
	case c.apiserver != nil && !c.apiserver.exited():
		return fmt.Errorf("start apiserver: %w", ErrAPIServerRunning)
	}
	args := []string{
		"--dir", filepath.Join(c.Dir, "apiserver"),
		"--etcd-servers", c.EtcdURL,
		"--port", strconv.Itoa(c.port),
		"--service-cluster-ip-range", ServiceCIDRv4 + "," + ServiceCIDRv6,
	}
	if len(c.opts.APIServerArgs) > 0 {
		args = append(append(args, "--"), c.opts.APIServerArgs...)
	}
	p, addr, err := startProc(ctx, "apiserver", c.bins.APIServer, args, filepath.Join(c.Dir, "apiserver.log"))
	if err != nil {
		return err
	}
	if c.URL != "" && addr != c.URL {
		p.kill()
		return fmt.Errorf("start apiserver: restarted on %s, not on %s", addr, c.URL)
	}
	c.apiserver = p
	if c.URL == "" {
		c.URL = addr // set once, before New returns: readers need no lock
	}
	return nil
}

// StopAPIServer stops the apiserver gracefully (SIGTERM) and returns once
// it has exited; etcd keeps running.
func (c *Cluster) StopAPIServer() error {
	return c.stopAPIServer(false)
}

// KillAPIServer kills the apiserver (SIGKILL), as a crash would: open
// connections are reset rather than closed.
func (c *Cluster) KillAPIServer() error {
	return c.stopAPIServer(true)
}

func (c *Cluster) stopAPIServer(kill bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("stop apiserver: %w", ErrClosed)
	case c.apiserver == nil || c.apiserver.exited():
		return fmt.Errorf("stop apiserver: %w", ErrAPIServerStopped)
	}
	p := c.apiserver
	c.apiserver = nil
	if kill {
		p.kill()
		return nil
	}
	return p.stop(stopGrace)
}

// Close stops the apiserver and etcd and removes Dir. It may be called
// more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	if c.apiserver != nil && !c.apiserver.exited() {
		errs = append(errs, c.apiserver.stop(stopGrace))
	}
	if c.etcd != nil && !c.etcd.exited() {
		errs = append(errs, c.etcd.stop(stopGrace))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close cluster: %w (state left in %s)", err, c.Dir)
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("close cluster: %w", err)
	}
	return nil
}

// LogTail returns the last n lines of the log of "etcd" or "apiserver".
func (c *Cluster) LogTail(name string, n int) string {
	return logTail(filepath.Join(c.Dir, name+".log"), n)
}

// pids returns the process ids of the running processes (for tests).
func (c *Cluster) pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, p := range []*proc{c.etcd, c.apiserver} {
		if p != nil && !p.exited() {
			out = append(out, p.cmd.Process.Pid)
		}
	}
	return out
}
