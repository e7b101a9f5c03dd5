// Command kube-apiserver runs a real Kubernetes apiserver (k8s.io/kubernetes,
// the version in this module's go.mod) in-process, for actorlb's
// Kubernetes-mode tests. It is test tooling, not part of actorlb.
//
// It listens on --bind (default 127.0.0.1) and --port; --port 0 takes a
// free port, and a restart on the same --dir with --port set to the port of
// the first start gets the same address back (it retries for a while if the
// port is still taken). Storage is the etcd at --etcd-servers.
//
// Into --dir it writes, once, a CA, the serving certificate, a service
// account key and a token file with two users: actorlb-admin (in
// system:masters) and actorlb-agent (no rights until a test binds some);
// then, when /readyz answers, admin.kubeconfig, agent.kubeconfig and
// address (https://HOST:PORT), and prints one line on stdout:
//
//	ready https://127.0.0.1:PORT
//
// Flags after "--" go to the apiserver unchanged. SIGTERM or SIGINT stop
// it gracefully; it exits 0 after a clean stop.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// Defaults for the service ranges: inside the benchmarking ranges
// 198.18.0.0/15 and 2001:2::/48 (which the apiserver accepts as endpoint
// addresses, unlike loopback), apart from the parts tests use for
// endpoints (198.18.0.0/16 and 2001:2::/64).
const defaultServiceCIDRs = "198.19.0.0/16,2001:2:0:1::/108"

type config struct {
	dir          string
	etcd         string
	bind         string
	port         int
	serviceCIDRs string
	readyTimeout time.Duration
	stopTimeout  time.Duration
	extra        []string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-apiserver: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "kube-apiserver: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("kube-apiserver", flag.ContinueOnError)
	fs.StringVar(&cfg.dir, "dir", "", "state directory: credentials, kubeconfigs, address (required)")
	fs.StringVar(&cfg.etcd, "etcd-servers", "", "etcd client URL(s), comma-separated (required)")
	fs.StringVar(&cfg.bind, "bind", "127.0.0.1", "address to listen on")
	fs.IntVar(&cfg.port, "port", 0, "port to listen on; 0 takes a free one")
	fs.StringVar(&cfg.serviceCIDRs, "service-cluster-ip-range", defaultServiceCIDRs, "service CIDRs (one per family)")
	fs.DurationVar(&cfg.readyTimeout, "ready-timeout", 3*time.Minute, "how long to wait for /readyz")
	fs.DurationVar(&cfg.stopTimeout, "stop-timeout", 30*time.Second, "how long a graceful stop may take")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	cfg.extra = fs.Args()
	switch {
	case cfg.dir == "":
		return config{}, errors.New("flags: --dir is required")
	case cfg.etcd == "":
		return config{}, errors.New("flags: --etcd-servers is required")
	case cfg.port < 0 || cfg.port > 65535:
		return config{}, fmt.Errorf("flags: --port %d is not a port", cfg.port)
	case net.ParseIP(cfg.bind) == nil:
		return config{}, fmt.Errorf("flags: --bind %q is not an IP address", cfg.bind)
	}
	return cfg, nil
}

func run(cfg config) error {
	if err := os.MkdirAll(cfg.dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	cr, err := loadOrCreateCreds(cfg.dir)
	if err != nil {
		return err
	}
	ln, err := listen(cfg.bind, cfg.port, 30*time.Second)
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	url := "https://" + net.JoinHostPort(cfg.bind, strconv.Itoa(port))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	completed, err := apiserverOptions(cfg, cr, ln, port)
	if err != nil {
		ln.Close()
		return err
	}

	runErr := make(chan error, 1)
	go func() { runErr <- app.Run(ctx, completed) }()

	readyCtx, cancelReady := context.WithTimeout(ctx, cfg.readyTimeout)
	defer cancelReady()
	ready := make(chan error, 1)
	go func() { ready <- waitReady(readyCtx, url, cr) }()

	select {
	case err := <-runErr:
		return fmt.Errorf("run: %w", errOrExited(err))
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("wait for /readyz: %w", err)
		}
	}
	if err := writeClientFiles(cfg.dir, url, cr); err != nil {
		return err
	}
	fmt.Printf("ready %s\n", url)

	select {
	case err := <-runErr:
		if ctx.Err() == nil {
			return fmt.Errorf("run: %w", errOrExited(err))
		}
		return nil
	case <-ctx.Done():
	}
	select {
	case err := <-runErr:
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "kube-apiserver: stopped: %v\n", err)
		}
		return nil
	case <-time.After(cfg.stopTimeout):
		return fmt.Errorf("stop: not stopped %s after the signal", cfg.stopTimeout)
	}
}

func errOrExited(err error) error {
	if err == nil {
		return errors.New("exited without an error")
	}
	return err
}

// listen listens on bind:port; a port still held (by the previous run's
// sockets, or by someone else) is retried until wait has passed.
func listen(bind string, port int, wait time.Duration) (net.Listener, error) {
	addr := net.JoinHostPort(bind, strconv.Itoa(port))
	deadline := time.Now().Add(wait)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		if port == 0 || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apiserverOptions builds the apiserver's options as its own command line
// would, on the listener ln.
func apiserverOptions(cfg config, cr creds, ln net.Listener, port int) (options.CompletedOptions, error) {
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, set := range s.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	args := []string{
		"--etcd-servers=" + cfg.etcd,
		"--bind-address=" + cfg.bind,
		"--advertise-address=" + cfg.bind,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + cr.path(servingCertFile),
		"--tls-private-key-file=" + cr.path(servingKeyFile),
		"--token-auth-file=" + cr.path(tokensFile),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + cr.path(saKeyFile),
		"--service-account-signing-key-file=" + cr.path(saKeyFile),
		"--service-cluster-ip-range=" + cfg.serviceCIDRs,
		// No kube-apiserver endpoints in the kubernetes service: its
		// address is loopback, which endpoints may not hold.
		"--endpoint-reconciler-type=none",
		// No controller manager creates the default service accounts
		// that this plugin requires of every pod.
		"--disable-admission-plugins=ServiceAccount",
		// Close open watches at once on SIGTERM: by default the server
		// waits for them (a minute) before it exits.
		"--shutdown-watch-termination-grace-period=1s",
		"--profiling=false",
	}
	args = append(args, cfg.extra...)
	if err := fs.Parse(args); err != nil {
		return options.CompletedOptions{}, fmt.Errorf("apiserver flags: %w", err)
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = port

	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return options.CompletedOptions{}, fmt.Errorf("apiserver feature gates: %w", err)
	}
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return options.CompletedOptions{}, fmt.Errorf("apiserver logging: %w", err)
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})

	completed, err := s.Complete(context.Background())
	if err != nil {
		return options.CompletedOptions{}, fmt.Errorf("apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return options.CompletedOptions{}, fmt.Errorf("apiserver options: %w", utilerrors.NewAggregate(errs))
	}
	return completed, nil
}

// waitReady polls url/readyz as the admin until it answers 200.
func waitReady(ctx context.Context, url string, cr creds) error {
	caPEM, err := os.ReadFile(cr.path(caCertFile))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no certificate in " + cr.path(caCertFile))
	}
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer client.CloseIdleConnections()
	last := errors.New("no answer yet")
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+cr.adminToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("status %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeClientFiles writes the kubeconfigs of both users and the address.
func writeClientFiles(dir, url string, cr creds) error {
	for _, u := range []struct{ file, user, token string }{
		{"admin.kubeconfig", adminUser, cr.adminToken},
		{"agent.kubeconfig", agentUser, cr.agentToken},
	} {
		kc := clientcmdapi.NewConfig()
		kc.Clusters["actorlb-test"] = &clientcmdapi.Cluster{Server: url, CertificateAuthority: cr.path(caCertFile)}
		kc.AuthInfos[u.user] = &clientcmdapi.AuthInfo{Token: u.token}
		kc.Contexts["actorlb-test"] = &clientcmdapi.Context{Cluster: "actorlb-test", AuthInfo: u.user}
		kc.CurrentContext = "actorlb-test"
		data, err := clientcmd.Write(*kc)
		if err != nil {
			return fmt.Errorf("write %s: %w", u.file, err)
		}
		if err := writeFileAtomic(filepath.Join(dir, u.file), data, 0o600); err != nil {
			return err
		}
	}
	return writeFileAtomic(filepath.Join(dir, "address"), []byte(url+"\n"), 0o644)
}
