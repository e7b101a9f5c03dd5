package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/bpf"
	"github.com/actorlb/actorlb/bpf/packetlb"
	"github.com/actorlb/actorlb/internal/bpffs"
	"github.com/actorlb/actorlb/internal/maglev"
	"github.com/actorlb/actorlb/k8s/source"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Agent errors.
var (
	// errInUse occurs when another agent holds the socket or the maps.
	errInUse = errors.New("in use by another agent")
	// errRemote occurs when --api-addr is not a loopback address and
	// --api-allow-remote is not given.
	errRemote = errors.New("not a loopback address")
	// errNoToken occurs when --api-addr is given without --api-token-file
	// and without --api-insecure.
	errNoToken = errors.New("the TCP listener needs a token")
)

// shutdownTimeout bounds how long requests in flight may take once the
// agent is told to stop.
const shutdownTimeout = 10 * time.Second

func agentCommand() *command {
	return &command{
		use:   "agent [flags]",
		short: "run the agent: restore the pinned maps and serve the API",
		long: `Opens (or creates) the service, backend and revNAT maps pinned under
--bpf-root, restores the services they hold (same IDs; no map writes when the
maps are consistent, every inconsistency repaired and counted), then serves
the REST API on the unix socket --socket (mode 0660) and, if --api-addr is
given, on a loopback TCP address. It prints one line when it is ready, tells
systemd (NOTIFY_SOCKET) the same, and runs until SIGINT, SIGTERM or SIGHUP (it
has nothing to reload: SIGHUP stops it cleanly too); the maps
stay pinned when it stops, so the datapath keeps working and the next start
restores them.

Security: the unix socket needs no credentials; its mode (0660) and group
(--socket-group) decide who may use the API. The TCP listener requires a
bearer token, read from --api-token-file, on every request (clients pass
--token-file), and answers only requests whose Host names localhost, a
loopback address or the listen address; --api-insecure serves it without
a token (any local user then controls the load balancer).

Ready means: the restore is done and the socket (and --api-addr) is bound,
so a client that waits for the "actorlb agent ready" line or for READY=1
can connect at once and /v1/healthz answers 200. The API answers nothing,
/v1/healthz included, before that line is printed.

NodePort services: the agent refuses one whose frontend port is outside
--node-port-range or whose address is neither the surrogate (0.0.0.0, ::)
nor one of --node-addresses; GET /v1/config reports both.

Conntrack GC: every --conntrack-gc-interval the agent reads the next page
(at most 4096 entries) of the packet datapath's conntrack maps pinned under
--bpf-root (lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev) and deletes the expired
flows and the orphaned reverse entries; it idles while none is pinned.

One agent per --bpf-root and per --socket: a second one is refused. A socket
file left behind by an agent that died is replaced; any other file is not.`,
		examples: `  actorlb agent                                    # as root: maps in /sys/fs/bpf/actorlb
  actorlb agent --api-addr 127.0.0.1:8080 --api-token-file /etc/actorlb/token   # also serve the API on loopback TCP
  actorlb agent --dry-run --socket /tmp/alb.sock   # no privileges: in-memory maps
  actorlb agent --restore=false                    # start empty: delete what the maps hold
  actorlb agent --node-addresses 192.168.1.10,127.0.0.1 --node-port-range 30000-32767   # where NodePort frontends may be
  actorlb agent --log-level debug --log-format json
  actorlb agent --cleanup --yes                    # remove actorlb from the node (agent stopped)`,
		flags: func(fs *pflag.FlagSet) {
			fs.String("bpf-root", maps.DefaultRoot, "bpffs directory the maps are pinned in (bpffs is mounted at /sys/fs/bpf if missing)")
			fs.String("socket", api.DefaultSocket, "unix socket of the API (created with mode 0660)")
			fs.String("api-addr", "", "also serve the API on this TCP address, IP:PORT (loopback only unless --api-allow-remote; port 0 picks one; needs --api-token-file or --api-insecure)")
			fs.Bool("api-allow-remote", false, "allow a non-loopback --api-addr (the token travels in clear text: anyone who sees it controls the load balancer)")
			fs.Int("map-max", maps.DefaultMaxEntries, "max entries of each service, backend, revNAT and source-range map; another value than the pinned maps' migrates them at start (every service kept)")
			fs.Uint32("maglev-table-size", maglev.DefaultTableSize, "entries of each maglev service's lookup table in lb4_maglev/lb6_maglev (M): a prime from 251 to 131071 (for example 251, 1021, 4093, 16381, 65521, 131071); each table takes 4×M bytes of kernel memory; aim for M > 100 × backends; changing it needs --recreate-maps (the tables are written again at start, nothing is lost)")
			fs.Duration("conntrack-gc-interval", actorlb.DefaultConntrackInterval, "how often the conntrack GC reads the next page (at most 4096 entries) of the packet datapath's conntrack maps (<bpf-root>/lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev) and deletes expired flows and orphaned reverse entries; it idles while the maps are not pinned (0: no GC)")
			fs.Duration("reconcile-interval", actorlb.DefaultReconcileInterval, "how often every map is compared with what the agent wrote, and its pin with the map, and repaired (0: only on demand, actorlb bpf lb reconcile)")
			fs.Bool("restore", true, "rebuild state from the pinned maps at start (false: empty them)")
			fs.Bool("restore-huge-pages", true, "ask the kernel for transparent huge pages for the memory the restore fills, where its policy is madvise (one page fault per 2 MiB instead of per 4 KiB; a restart of 10k services spends most of its time in page faults on some VMs); false: 4 KiB pages only")
			fs.Bool("recreate-maps", false, "replace pinned maps whose shape differs from the configured one (their entries are lost)")
			fs.Bool("dry-run", false, "use in-memory maps: no kernel, no privileges, nothing pinned")
			fs.String("log-level", "info", "log level: trace, debug, info, warn or error")
			fs.String("log-format", "text", "log format: text or json")
			fs.Bool("socket-lb", os.Geteuid() == 0, "load-balance connections of local processes to service VIPs with the socket-LB BPF programs (cgroup connect/sendmsg/recvmsg/getpeername hooks); their links are pinned under --bpf-root/links so they keep working across agent restarts; default on when running as root; false leaves whatever is attached alone")
			fs.StringSlice("datapath-devices", nil, "interfaces (comma-separated) whose incoming traffic the packet datapath load-balances: connections from other hosts to a service frontend (VIP, ExternalIP, LoadBalancer IP, or the interface's address on a NodePort) go to a backend by SNAT/DNAT or L2 DSR; XDP plus a tc companion, links pinned under --bpf-root/links (kept across restarts); needs forwarding on (sysctl net.ipv4.conf.all.forwarding=1, net.ipv6.conf.all.forwarding=1); empty: not attached")
			fs.Int("conntrack-max", 0, "capacity of each of the packet datapath's conntrack maps (LRU; "+strconv.Itoa(packetlb.MinConntrackMax)+".."+strconv.Itoa(packetlb.MaxConntrackMax)+"; 0: keep the pinned maps', else "+strconv.Itoa(packetlb.DefaultConntrackMax)+"); another value replaces the maps and forgets the connections they track")
			fs.String("datapath-mode", "auto", "how --datapath-devices are attached: auto (XDP in the driver where supported, else generic XDP), native, generic, or tc (tc ingress only, no XDP)")
			fs.String("socket-lb-cgroup", "", "cgroup v2 directory the socket-LB programs attach to (default: the root of the cgroup2 mount, i.e. every process)")
			fs.Bool("cleanup", false, "do not run: remove actorlb from this node (detach the datapath, remove the pins under --bpf-root and the socket) after asking for confirmation; the agent must be stopped")
			fs.Bool("yes", false, "with --cleanup: do not ask for confirmation")
			// API security (issue 13).
			fs.String("api-token-file", "", "file holding the bearer token every request on --api-addr must carry (first line; not readable by every user)")
			fs.Bool("api-insecure", false, "serve --api-addr without a token (any local user can then control the load balancer)")
			fs.String("node-addresses", "", "the node's own addresses, comma-separated: a NodePort service's frontend is the surrogate (0.0.0.0 or ::) or one of them ('' for none: the surrogate only; default: the host's global unicast addresses plus 127.0.0.1 and ::1 when present)")
			fs.String("node-port-range", lb.DefaultNodePortRange.String(), "MIN-MAX: the ports a NodePort service's frontend may have; others are refused")
			fs.String("socket-group", "", "group (name or GID) that owns --socket, so its members may use the API without root (mode 0660)")
			// Kubernetes mode (issue 16).
			fs.String("k8s-kubeconfig", "", "Kubernetes mode: watch the Services and EndpointSlices of the cluster this kubeconfig file reaches and program them, as kube-proxy does (needs list/watch on services, endpointslices and nodes; see deploy/)")
			fs.Bool("k8s-in-cluster", false, "Kubernetes mode, from inside a pod: reach the apiserver with the pod's service account (KUBERNETES_SERVICE_HOST and the mounted token)")
			fs.String("k8s-node-name", "", "Kubernetes mode: this node's name (endpoints on it are node-local; without --node-addresses its InternalIP addresses get the NodePort frontends); default: the host name")
			fs.Bool("k8s-sync-huge-pages", true, "Kubernetes mode: ask the kernel for transparent huge pages for the memory the informers' lists and the full sync fill, where its policy is madvise (one page fault per 2 MiB instead of per 4 KiB); false: 4 KiB pages only")
		},
		run: runAgent,
	}
}

type agentConfig struct {
	root, socket, apiAddr           string
	allowRemote, restore, recreate  bool
	restoreHugePages                bool
	dryRun, socketLB, socketLBAsked bool
	socketLBCgroup                  string
	devices                         []string
	datapathMode                    packetlb.Mode
	conntrackMax                    int
	mapMax                          int
	maglevSize                      uint32
	reconcile                       time.Duration
	conntrackGC                     time.Duration // 0: no conntrack GC
	log                             *logrus.Logger
	stdout                          io.Writer
	sizes                           maps.Sizes
	token                           string
	insecure                        bool
	socketGID                       int // -1: leave the socket's group alone
	nodeAddrs                       []netip.Addr
	nodePortRange                   lb.PortRange
	k8s                             *k8sConfig // nil: no Kubernetes mode
}

// k8sConfig is the Kubernetes mode's: where the apiserver is, the node's
// name, and the addresses NodePort frontends get (nil: the Node's
// InternalIPs).
type k8sConfig struct {
	client    kubernetes.Interface
	from      string // what reached the apiserver: the kubeconfig path, or "in-cluster"
	host      string
	nodeName  string
	nodeAddrs []netip.Addr
	hugePages bool // --k8s-sync-huge-pages
}

func agentFlags(e *env) (*agentConfig, error) {
	fs := e.fs
	c := &agentConfig{stdout: e.stdout}
	c.root, _ = fs.GetString("bpf-root")
	c.socket, _ = fs.GetString("socket")
	c.apiAddr, _ = fs.GetString("api-addr")
	c.allowRemote, _ = fs.GetBool("api-allow-remote")
	c.mapMax, _ = fs.GetInt("map-max")
	c.maglevSize, _ = fs.GetUint32("maglev-table-size")
	c.reconcile, _ = fs.GetDuration("reconcile-interval")
	c.conntrackGC, _ = fs.GetDuration("conntrack-gc-interval")
	c.restore, _ = fs.GetBool("restore")
	c.restoreHugePages, _ = fs.GetBool("restore-huge-pages")
	c.recreate, _ = fs.GetBool("recreate-maps")
	c.dryRun, _ = fs.GetBool("dry-run")
	c.socketLB, _ = fs.GetBool("socket-lb")
	c.socketLBAsked = fs.Changed("socket-lb")
	c.socketLBCgroup, _ = fs.GetString("socket-lb-cgroup")
	c.devices, _ = fs.GetStringSlice("datapath-devices")
	c.conntrackMax, _ = fs.GetInt("conntrack-max")
	mode, _ := fs.GetString("datapath-mode")
	var err error
	if c.datapathMode, err = packetlb.ParseMode(mode); err != nil {
		return nil, fmt.Errorf("invalid --datapath-mode: %w", err)
	}
	level, _ := fs.GetString("log-level")
	format, _ := fs.GetString("log-format")

	c.log = logrus.New()
	c.log.SetOutput(e.stderr)
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: want trace, debug, info, warn or error", level)
	}
	c.log.SetLevel(lvl)
	switch format {
	case "text":
	case "json":
		c.log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("invalid --log-format %q: want text or json", format)
	}
	if c.mapMax < 1 || c.mapMax > 1<<24 {
		return nil, fmt.Errorf("invalid --map-max %d: must be between 1 and %d", c.mapMax, 1<<24)
	}
	c.sizes = maps.Sizes{Services: c.mapMax, Backends: c.mapMax, RevNAT: c.mapMax, SourceRanges: c.mapMax}
	if err := maglev.CheckTableSize(c.maglevSize); err != nil {
		return nil, fmt.Errorf("invalid --maglev-table-size %d: want a prime in [%d, %d] (for example 251, 1021, 4093, 16381, 65521, 131071)",
			c.maglevSize, maglev.MinTableSize, maglev.MaxTableSize)
	}
	if c.reconcile < 0 || (c.reconcile > 0 && c.reconcile < 100*time.Millisecond) {
		return nil, fmt.Errorf("invalid --reconcile-interval %s: must be 0 (off) or at least 100ms", c.reconcile)
	}
	if c.reconcile == 0 {
		c.reconcile = -1 // the library's "only on demand"
	}
	if c.conntrackGC < 0 || (c.conntrackGC > 0 && c.conntrackGC < 100*time.Millisecond) {
		return nil, fmt.Errorf("invalid --conntrack-gc-interval %s: must be 0 (off) or at least 100ms", c.conntrackGC)
	}
	if c.socket == "" {
		return nil, errors.New("invalid --socket \"\": want the path of the API's unix socket")
	}
	if c.socket, err = filepath.Abs(c.socket); err != nil {
		return nil, fmt.Errorf("invalid --socket: %w", err)
	}
	if len(c.socket) > 104 {
		return nil, fmt.Errorf("invalid --socket %s: longer than 104 bytes, the limit of a unix socket path (pick a shorter one)", c.socket)
	}
	if c.apiAddr != "" {
		if err := checkAPIAddr(c.apiAddr, c.allowRemote); err != nil {
			return nil, err
		}
	}
	if err := securityFlags(fs, c); err != nil {
		return nil, err
	}
	if err := nodePortFlags(fs, c); err != nil {
		return nil, err
	}
	if err := k8sFlags(fs, c); err != nil {
		return nil, err
	}
	if c.socketLBCgroup != "" && c.socketLB && !c.dryRun {
		var st unix.Statfs_t
		if err := unix.Statfs(c.socketLBCgroup, &st); err != nil {
			return nil, fmt.Errorf("invalid --socket-lb-cgroup %s: %w", c.socketLBCgroup, err)
		}
		if st.Type != unix.CGROUP2_SUPER_MAGIC {
			return nil, fmt.Errorf("invalid --socket-lb-cgroup %s: not a cgroup v2 directory", c.socketLBCgroup)
		}
	}
	return c, nil
}

// nodePortFlags reads --node-addresses and --node-port-range into c,
// checked; without --node-addresses the host's addresses are used.
func nodePortFlags(fs *pflag.FlagSet, c *agentConfig) error {
	rng, _ := fs.GetString("node-port-range")
	r, err := lb.ParsePortRange(rng)
	if err != nil {
		var ve *lb.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("invalid --node-port-range %q: %s", rng, ve.Reason)
		}
		return fmt.Errorf("invalid --node-port-range %q: %w", rng, err)
	}
	c.nodePortRange = r
	if !fs.Changed("node-addresses") {
		c.nodeAddrs, err = hostNodeAddresses()
		if err != nil {
			return fmt.Errorf("list the host's addresses for --node-addresses: %w (give them with --node-addresses)", err)
		}
		return nil
	}
	list, _ := fs.GetString("node-addresses")
	addrs, err := parseNodeAddresses(list)
	if err != nil {
		return err
	}
	c.nodeAddrs = addrs
	return nil
}

// k8sFlags reads --k8s-kubeconfig, --k8s-in-cluster, --k8s-node-name and
// --k8s-sync-huge-pages into c.k8s, checked (the kubeconfig is read;
// nothing is asked of the apiserver yet). In Kubernetes mode, NodePort
// frontends get the Node's InternalIPs unless --node-addresses is given.
func k8sFlags(fs *pflag.FlagSet, c *agentConfig) error {
	path, _ := fs.GetString("k8s-kubeconfig")
	inCluster, _ := fs.GetBool("k8s-in-cluster")
	nodeName, _ := fs.GetString("k8s-node-name")
	hugePages, _ := fs.GetBool("k8s-sync-huge-pages")
	switch {
	case path != "" && inCluster:
		return errors.New("invalid --k8s-kubeconfig with --k8s-in-cluster: give one way to reach the apiserver")
	case path == "" && !inCluster:
		for _, f := range []string{"k8s-node-name", "k8s-sync-huge-pages"} {
			if fs.Changed(f) {
				return fmt.Errorf("invalid --%s: only for Kubernetes mode (--k8s-kubeconfig or --k8s-in-cluster)", f)
			}
		}
		return nil
	}
	k := &k8sConfig{nodeName: nodeName, hugePages: hugePages}
	var rc *rest.Config
	var err error
	if inCluster {
		k.from = "in-cluster"
		if rc, err = rest.InClusterConfig(); err != nil {
			return fmt.Errorf("invalid --k8s-in-cluster: %w (outside a pod, use --k8s-kubeconfig)", err)
		}
	} else {
		k.from = path
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("invalid --k8s-kubeconfig %s: %w", path, err)
		}
		if rc, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
			return fmt.Errorf("invalid --k8s-kubeconfig %s: %w", path, err)
		}
	}
	rc.UserAgent = "actorlb/" + api.Build().Version
	source.UseProtobuf(rc)
	k.host = rc.Host
	if k.client, err = kubernetes.NewForConfig(rc); err != nil {
		return fmt.Errorf("invalid --k8s-kubeconfig %s: %w", path, err)
	}
	if k.nodeName == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return fmt.Errorf("the node name: no --k8s-node-name and no host name (%v)", err)
		}
		k.nodeName = strings.ToLower(h)
	}
	if fs.Changed("node-addresses") {
		k.nodeAddrs = slices.Clone(c.nodeAddrs)
	}
	c.k8s = k
	return nil
}

// parseNodeAddresses parses --node-addresses: IP addresses separated by
// commas, each once; "" is none.
func parseNodeAddresses(list string) ([]netip.Addr, error) {
	out := []netip.Addr{}
	if strings.TrimSpace(list) == "" {
		return out, nil
	}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			return nil, fmt.Errorf("invalid --node-addresses: %q is not an IP address", s)
		case a.Zone() != "":
			return nil, fmt.Errorf("invalid --node-addresses: %q has a zone (link-local addresses cannot be NodePort frontends)", s)
		}
		a = a.Unmap()
		switch {
		case a.IsUnspecified():
			return nil, fmt.Errorf("invalid --node-addresses: %s is the surrogate, always allowed (leave it out)", a)
		case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			return nil, fmt.Errorf("invalid --node-addresses: %s is not a unicast address", a)
		case slices.Contains(out, a):
			return nil, fmt.Errorf("invalid --node-addresses: %s is given twice", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// hostNodeAddresses returns the default of --node-addresses: the global
// unicast addresses of the host's interfaces, then 127.0.0.1 and ::1 if
// an interface has them.
func hostNodeAddresses() ([]netip.Addr, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := []netip.Addr{}
	var lo4, lo6 bool
	for _, ia := range ifAddrs {
		ipn, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		switch {
		case a == netip.AddrFrom4([4]byte{127, 0, 0, 1}):
			lo4 = true
		case a == netip.IPv6Loopback():
			lo6 = true
		case a.IsGlobalUnicast() && !slices.Contains(out, a):
			out = append(out, a)
		}
	}
	if lo4 {
		out = append(out, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	}
	if lo6 {
		out = append(out, netip.IPv6Loopback())
	}
	return out, nil
}

// securityFlags reads --api-token-file, --api-insecure and --socket-group
// into c, checked: a TCP listener needs a token or --api-insecure, and the
// group must exist.
func securityFlags(fs *pflag.FlagSet, c *agentConfig) error {
	tokenFile, _ := fs.GetString("api-token-file")
	c.insecure, _ = fs.GetBool("api-insecure")
	group, _ := fs.GetString("socket-group")
	if tokenFile != "" {
		token, err := api.ReadTokenFile(tokenFile)
		if err != nil {
			return fmt.Errorf("invalid --api-token-file: %w", err)
		}
		c.token = token
	}
	if c.apiAddr != "" && c.token == "" && !c.insecure {
		return fmt.Errorf("refusing --api-addr %s: %w (pass --api-token-file FILE, and --token-file FILE to the clients; or --api-insecure to let any local user control the load balancer)", c.apiAddr, errNoToken)
	}
	c.socketGID = -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			g, err = user.LookupGroupId(group)
		}
		if err != nil {
			return fmt.Errorf("invalid --socket-group %q: no such group", group)
		}
		if c.socketGID, err = strconv.Atoi(g.Gid); err != nil {
			return fmt.Errorf("invalid --socket-group %q: GID %q is not a number", group, g.Gid)
		}
	}
	return nil
}

// checkAPIAddr refuses an --api-addr that is not IP:PORT or localhost:PORT,
// or that is not loopback without allowRemote.
func checkAPIAddr(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("invalid --api-addr %q: want IP:PORT, like 127.0.0.1:8080", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || strconv.FormatUint(n, 10) != port {
		return fmt.Errorf("invalid --api-addr %q: the port must be a number between 0 and 65535", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if host != "" && err != nil {
		return fmt.Errorf("invalid --api-addr %q: the host must be an IP address or localhost", addr)
	}
	if (host == "" || !ip.IsLoopback()) && !allowRemote {
		return fmt.Errorf("refusing --api-addr %s: %w (its token would travel in clear text; use 127.0.0.1 or [::1], or pass --api-allow-remote to serve it on other addresses anyway)", addr, errRemote)
	}
	return nil
}

func runAgent(ctx context.Context, e *env, args []string) error {
	if err := wantArgs("agent", args, 0, "only flags"); err != nil {
		return err
	}
	c, err := agentFlags(e)
	if err != nil {
		return &usageError{err}
	}
	if cleanup, _ := e.fs.GetBool("cleanup"); cleanup {
		yes, _ := e.fs.GetBool("yes")
		return cleanupNode(c, yes, e.stdin)
	}
	if err := agent(ctx, c); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// lockFile takes an exclusive, non-blocking flock on path (a directory, or
// a file created if missing) on behalf of the flag's value. The lock goes
// with the process. A file is opened without following a symbolic link
// (a link planted there by another user must not make the agent create or
// lock a file elsewhere), and the lock must still be on the file at path
// once taken: an agent that stops removes its lock file, so a lock taken
// on a file removed meanwhile is taken again on the new one.
func lockFile(path string, create bool, flag, value string) (*os.File, error) {
	flags := os.O_RDONLY
	if create {
		flags |= os.O_CREATE | unix.O_NOFOLLOW
	}
	for range 3 {
		f, err := os.OpenFile(path, flags, 0o600)
		if err != nil {
			if errors.Is(err, unix.ELOOP) {
				return nil, fmt.Errorf("lock %s: it is a symbolic link (remove it, or pick another %s)", path, flag)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%s %s: %w (stop it first, or pick another %s)", flag, value, errInUse, flag)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, err1 := f.Stat()
		now, err2 := os.Lstat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close() // removed or replaced while we locked it: again
	}
	return nil, fmt.Errorf("lock %s: the file keeps being replaced (another agent starting and stopping?)", path)
}

// unlockFile removes the lock file at path that f holds, then releases it.
func unlockFile(f *os.File, path string) error {
	err := os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, f.Close())
}

// prepareSocket makes path free for a new socket: a socket file that
// nothing listens on is removed; anything else is refused.
func prepareSocket(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create socket directory: %w (run as root or pass --socket)", err)
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("check socket %s: %w", path, err)
	case fi.Mode().Type() != os.ModeSocket:
		return fmt.Errorf("refusing to replace %s: it is not a socket (remove it, or pick another --socket)", path)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("socket %s: %w: something listens on it (stop it first, or pick another --socket)", path, errInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// listenUnix listens on path with mode 0660 from the start (no window in
// which the socket is more open) and, if gid >= 0, gives it to group gid.
func listenUnix(path string, gid int) (net.Listener, error) {
	old := unix.Umask(0o117)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Lchown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("give %s to --socket-group: %w", path, err)
		}
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
}

// sdNotify tells systemd (Type=notify) about the agent's state; it does
// nothing without NOTIFY_SOCKET.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	return nil
}

func agent(ctx context.Context, c *agentConfig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	stop := func() { signal.Stop(sigs) }
	defer stop()
	gotHUP := make(chan bool, 1)
	go func() {
		select {
		case sig := <-sigs:
			gotHUP <- sig == syscall.SIGHUP
			cancel()
		case <-ctx.Done():
		}
	}()
	log := c.log

	// One agent per socket: the lock beside the socket makes replacing a
	// stale socket file safe.
	if err := os.MkdirAll(filepath.Dir(c.socket), 0o755); err != nil {
		return fmt.Errorf("create socket directory: %w (run as root or pass --socket)", err)
	}
	sockLock, err := lockFile(c.socket+".lock", true, "--socket", c.socket)
	if err != nil {
		return err
	}
	defer func() {
		if err := unlockFile(sockLock, c.socket+".lock"); err != nil {
			log.WithError(err).Warn("could not remove the socket's lock file")
		}
	}()
	if err := prepareSocket(c.socket); err != nil {
		return err
	}
	// The TCP listener is bound before the restore, so that a taken
	// address fails the start at once (it serves after the ready line).
	listeners := []net.Listener{}
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	if c.apiAddr != "" {
		tl, err := net.Listen("tcp", c.apiAddr)
		if err != nil {
			return fmt.Errorf("listen on --api-addr %s: %w", c.apiAddr, err)
		}
		listeners = append(listeners, tl)
		if ap, err := netip.ParseAddrPort(tl.Addr().String()); err == nil && !ap.Addr().IsLoopback() && !c.allowRemote {
			return fmt.Errorf("refusing --api-addr %s: it resolved to %s, %w (use 127.0.0.1, or pass --api-allow-remote)", c.apiAddr, ap, errRemote)
		}
	}
	// One agent per set of maps: two would overwrite each other's entries.
	if !c.dryRun {
		if err := bpffs.Ensure(c.root); err != nil {
			return err
		}
		rootLock, err := lockFile(c.root, false, "--bpf-root", c.root)
		if err != nil {
			return err
		}
		defer rootLock.Close()
	}

	ecfg := actorlb.Config{
		BPFRoot: c.root, MaxEntries: c.sizes, MaglevTableSize: c.maglevSize, RecreateMaps: c.recreate, NoRestore: !c.restore, InMemory: c.dryRun, Logger: log,
		ReconcileInterval: c.reconcile, NoRestoreHugePages: !c.restoreHugePages,
	}
	if !c.dryRun {
		ecfg.SocketTerminator = udpTerminator(c.root, logrus.NewEntry(log))
	}
	engine, err := actorlb.New(ctx, ecfg)
	if err != nil {
		return err
	}
	defer engine.Close()
	st, err := engine.Stats(ctx)
	if err != nil {
		return err
	}

	var socketLB func() string
	if c.socketLB && !c.dryRun {
		info, err := bpf.Attach(bpf.Config{Root: engine.BPFRoot(), Cgroup: c.socketLBCgroup})
		switch {
		case err != nil && c.socketLBAsked:
			return fmt.Errorf("%w (run with --socket-lb=false to go without the datapath)", err)
		case err != nil:
			// On by default only: serve the control plane anyway.
			log.WithError(err).Warn("socket LB not attached; the maps are served without actorlb's datapath (pass --socket-lb to make this fatal, --socket-lb=false to silence it)")
		default:
			log.Info(info.Summary())
		}
	}
	if !c.dryRun {
		// The socket LB falls back to a NodePort's surrogate frontend for
		// these addresses (and loopback). Written whether or not this agent
		// attached the programs: a datapath left attached reads them too.
		if err := bpf.SetNodeAddresses(engine.BPFRoot(), c.nodeAddrs); err != nil {
			if c.socketLBAsked {
				return fmt.Errorf("%w (run with --socket-lb=false to go without the datapath)", err)
			}
			log.WithError(err).Warn("node addresses not written to the datapath: NodePort surrogate frontends answer on loopback only")
		}
	}
	nodes := make([]string, len(c.nodeAddrs))
	for i, a := range c.nodeAddrs {
		nodes[i] = a.String()
	}
	log.WithFields(logrus.Fields{"node-addresses": strings.Join(nodes, ","), "node-port-range": c.nodePortRange.String()}).
		Info("NodePort frontends: the surrogate or a node address, ports in the node port range")
	if !c.dryRun {
		root := engine.BPFRoot()
		socketLB = func() string {
			st, err := bpf.Status(root)
			if err != nil {
				return "socket LB: " + err.Error()
			}
			return st.Summary()
		}
	}
	var packetLB func() string
	if len(c.devices) > 0 && !c.dryRun {
		info, err := packetlb.Attach(packetlb.Config{Root: engine.BPFRoot(), Devices: c.devices, Mode: c.datapathMode, MaglevTableSize: c.maglevSize, ConntrackMax: c.conntrackMax})
		if err != nil {
			return fmt.Errorf("%w (check --datapath-devices and --datapath-mode)", err)
		}
		log.Info(info.String())
		root := engine.BPFRoot()
		packetLB = func() string {
			st, err := packetlb.Status(root)
			if err != nil {
				return err.Error()
			}
			return st.String()
		}
	}
	var k8s *source.Source // set before the API serves
	acfg := api.Config{Engine: engine, Log: logrus.NewEntry(log), BPFRoot: engine.BPFRoot(), DryRun: c.dryRun, SocketLB: socketLB, PacketLB: packetLB,
		Token: c.token, Insecure: c.insecure, NodePort: &api.NodePortConfig{Range: c.nodePortRange, Addresses: c.nodeAddrs}}
	if c.k8s != nil {
		acfg.Sources = func() []api.SourceStatus { return []api.SourceStatus{sourceStatus(k8s.Status())} }
		acfg.ServiceName = func(fe lb.L3n4Addr) (string, string, bool) {
			n, ok := k8s.Name(fe)
			ns, name, _ := strings.Cut(n, "/")
			return ns, name, ok
		}
	}
	srv, err := api.NewServer(acfg)
	if err != nil {
		return err
	}
	if len(c.devices) > 0 && !c.dryRun {
		srv.Registerer().MustRegister(&packetLBCollector{root: engine.BPFRoot()})
	}
	if c.conntrackGC > 0 && !c.dryRun {
		// The packet datapath's conntrack maps: collected when pinned,
		// idle (and said so) while they are not.
		gc, err := actorlb.StartConntrackGC(ctx, actorlb.ConntrackConfig{Root: engine.BPFRoot(), Interval: c.conntrackGC, Logger: log})
		if err != nil {
			return err
		}
		defer gc.Close()
		srv.Registerer().MustRegister(&conntrackCollector{gc: gc, timeout: 5 * time.Second})
		log.WithFields(logrus.Fields{"interval": c.conntrackGC, "per-tick": actorlb.DefaultConntrackPerTick}).
			Info("conntrack GC started (the packet datapath's lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev)")
	}
	k8sDone := make(chan struct{})
	if c.k8s == nil {
		close(k8sDone)
	} else {
		k8s, err = source.New(source.Config{
			Client: c.k8s.client, NodeName: c.k8s.nodeName, NodeAddresses: c.k8s.nodeAddrs, Target: engine,
			Logger: log, Registerer: srv.Registerer(), NoHugePages: !c.k8s.hugePages,
			OnNodeAddresses: func(addrs []netip.Addr) {
				// The Node's addresses, when they are not given: the
				// socket LB's NodePort fallback follows them.
				if c.dryRun {
					return
				}
				if err := bpf.SetNodeAddresses(engine.BPFRoot(), addrs); err != nil {
					log.WithError(err).Warn("the Node's addresses not written to the datapath: NodePort surrogate frontends answer on the earlier addresses")
				}
			},
		})
		if err != nil {
			return err
		}
		addrs := "the Node's InternalIPs"
		if c.k8s.nodeAddrs != nil {
			addrs = fmt.Sprint(c.k8s.nodeAddrs)
		}
		log.WithFields(logrus.Fields{"apiserver": c.k8s.host, "from": c.k8s.from, "node": c.k8s.nodeName, "nodePortAddresses": addrs}).
			Info("Kubernetes mode: programming the cluster's Services and EndpointSlices")
		go func() {
			defer close(k8sDone)
			if err := k8s.Run(ctx); err != nil {
				log.WithError(err).Error("kubernetes source stopped")
			}
		}()
	}
	defer func() { cancel(); <-k8sDone }()
	ul, err := listenUnix(c.socket, c.socketGID)
	if err != nil {
		return err
	}
	listeners = append([]net.Listener{ul}, listeners...)
	var where []string
	for _, l := range listeners {
		where = append(where, api.ListenURL(l.Addr()))
	}

	// The ready line and READY=1 come after every listener is bound and
	// before any serves: whoever waits for either can connect at once (the
	// connection queues in the listen backlog until Serve accepts it), and
	// nothing, /v1/healthz included, answers before the announcement.
	mapsAt := engine.BPFRoot()
	if c.dryRun {
		mapsAt = "memory (dry run)"
	}
	r := st.Restore
	fmt.Fprintf(c.stdout, "actorlb agent ready: API on %s; maps in %s; restored %s, %s, %s, %s (%s); stop with Ctrl-C\n",
		strings.Join(where, " and "), mapsAt,
		plural(r.Services, "service", "services"), plural(r.Backends, "backend", "backends"),
		plural(r.OrphanRevNAT, "orphan revNAT entry deleted", "orphan revNAT entries deleted"),
		plural(r.Repairs, "repair", "repairs"), plural(r.Writes, "map write", "map writes"))
	if err := sdNotify("READY=1"); err != nil {
		log.WithError(err).Warn("could not tell systemd the agent is ready")
	}
	serveErr := make(chan error, len(listeners))
	for _, l := range listeners {
		go func() { serveErr <- srv.Serve(l) }()
	}

	var failed error
	select {
	case <-ctx.Done():
		stop() // a second signal ends the process at once
		select {
		case hup := <-gotHUP:
			if hup {
				log.WithField("signal", "SIGHUP").Info("received SIGHUP: the agent has no configuration to reload; stopping cleanly")
			}
		default:
		}
		log.Info("shutting down; maps stay pinned")
	case failed = <-serveErr:
		log.WithError(failed).Error("api server failed; shutting down")
	}
	_ = sdNotify("STOPPING=1")
	cancel() // the Kubernetes source stops before the engine closes
	<-k8sDone
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	shutErr := srv.Shutdown(sctx)
	closeErr := engine.Close()
	if err := os.Remove(c.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.WithError(err).Warn("could not remove the socket")
	}
	if err := errors.Join(failed, shutErr, closeErr); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "actorlb agent stopped; maps stay pinned in %s\n", mapsAt)
	return nil
}

// udpTerminator closes, through the socket-LB datapath, the connected UDP
// sockets of backends that left a service (actorlb.Config.SocketTerminator).
// A kernel without bpf_sock_destroy is said once, then the calls fail
// quietly (counted in the stats).
func udpTerminator(root string, log *logrus.Entry) actorlb.SocketTerminator {
	var warned atomic.Bool
	return func(ts []actorlb.SocketTarget) (int, error) {
		targets := make([]bpf.UDPTarget, 0, len(ts))
		for _, t := range ts {
			targets = append(targets, bpf.UDPTarget{Backend: t.Backend.AddrPort(), Service: t.Service})
		}
		n, err := bpf.TerminateUDPSocketsOf(root, targets)
		switch {
		case err != nil && errors.Is(err, bpf.ErrSockDestroyNotSupported):
			if !warned.Swap(true) {
				log.WithError(err).Warn("connected UDP sockets cannot be moved off removed backends on this kernel")
			}
		case err != nil:
			log.WithError(err).Warn("closing connected UDP sockets of removed backends failed")
		case n > 0:
			log.WithFields(logrus.Fields{"sockets": n, "backends": len(targets)}).Debug("closed connected UDP sockets of removed backends")
		}
		return n, err
	}
}

// sourceStatus is what /v1/healthz says of the Kubernetes source.
func sourceStatus(st source.Status) api.SourceStatus {
	out := api.SourceStatus{
		Name: lb.SourceKubernetes.String(), Node: st.NodeName, NodeAddresses: []string{},
		Connected: st.Connected, Synced: st.Synced, LastError: st.LastError, LastApplyError: st.LastApplyError,
		Services: st.Services, Frontends: st.Frontends, Pending: st.Pending, LastSyncSeconds: st.LastSyncDuration.Seconds(),
	}
	for _, a := range st.NodeAddresses {
		out.NodeAddresses = append(out.NodeAddresses, a.String())
	}
	if !st.LastEvent.IsZero() {
		out.LastEvent = st.LastEvent.UTC().Format(time.RFC3339Nano)
	}
	if !st.LastErrorTime.IsZero() {
		out.LastErrorTime = st.LastErrorTime.UTC().Format(time.RFC3339Nano)
	}
	for _, c := range st.Conflicts {
		out.Conflicts = append(out.Conflicts, api.SourceConflict{Frontend: c.Frontend.String(), Service: c.Service, Reason: c.Reason})
	}
	return out
}
