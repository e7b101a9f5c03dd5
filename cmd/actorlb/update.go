package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/actorlb/actorlb/api"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/spf13/pflag"
)

func serviceUpdateCommand() *command {
	return &command{
		use:   "service update --id ID [--frontend ADDR] [--backends ADDR[,ADDR...]] [flags]",
		short: "create a service, or change the parts of it given",
		long: `Creates the service with --id (--frontend is then required), or updates it:
only what is given changes, the rest is kept as the agent holds it (the
command reads the service, changes what the flags say and writes it back).

  --backends    replaces the list of backends; --backends '' removes them all.
                A backend already in the service keeps its weight and state
                unless --weights or --states say otherwise; a new one takes
                the state it has in other services (a backend's state is
                shared by every service that uses it), else active.
  --weights     one weight per backend, in the order of --backends (or of
  --states      the service's backends when --backends is not given).
  --type        the service type; left out, the type is kept.
  --ext-traffic-policy, --int-traffic-policy
                Cluster or Local: Local sends traffic from outside the node
                (ext) or from the node itself (int) to node-local backends
                only. ext Local needs a type with an external side (not
                ClusterIP or LocalRedirect).
  --affinity-timeout SECONDS
                session affinity (ClientIP) with this timeout, 1..16777215;
                0 turns affinity off.
  --weights     W,... one per backend in order, or ADDR=W,... for the
                backends named (the others keep theirs).
  --node-local  the backends that run on this node (the others do not);
                '' for none. A Local policy uses only those.
  --lb-algorithm default, random or maglev (maglev is stored but has no
                effect on the socket LB yet: the command warns).

Addresses are IP:PORT[/PROTOCOL[/SCOPE]] (IPv6 in brackets; protocol tcp,
udp, sctp or any, tcp by default; scope external or internal). Backends take
the frontend's protocol and give no scope.

A service's frontend never changes: --frontend of an existing service must
be its own (it may be left out). To move a service to another frontend,
delete it and create it again. Nothing is changed when the agent refuses
the request. To change a backend's state everywhere at once, see
'actorlb backend set-state'.`,
		examples: `  actorlb service update --id 1 --frontend 10.96.0.10:80 --backends 10.0.1.5:8080
  actorlb service update --id 2 --frontend 10.96.0.53:53/udp --backends 10.0.1.7:53,10.0.1.8:53
  actorlb service update --id 3 --frontend [fd00::a]:443 --backends [fd00::1]:8443,[fd00::2]:8443 --weights 100,50
  actorlb service update --id 1 --backends 10.0.1.5:8080,10.0.1.6:8080 --states active,terminating
  actorlb service update --id 1 --type LoadBalancer --ext-traffic-policy Local
  actorlb service update --id 1 --affinity-timeout 10800
  actorlb service update --id 1 --affinity-timeout 0
  actorlb service update --id 1 --weights 10.0.1.5:8080=300,10.0.1.6:8080=100
  actorlb service update --id 2 --int-traffic-policy Local --node-local 10.0.1.7:53
  actorlb service update --id 2 --backends ''`,
		flags: func(fs *pflag.FlagSet) {
			fs.String("id", "", "service ID, 1..65535 (required)")
			fs.String("frontend", "", "frontend address IP:PORT[/PROTOCOL[/SCOPE]] (required to create; an existing service keeps its own)")
			serviceSpecFlags(fs)
		},
		run: runServiceUpdate,
	}
}

// serviceSpecFlags adds the flags service create and update share
// besides --id and --frontend.
func serviceSpecFlags(fs *pflag.FlagSet) {
	fs.StringSlice("backends", nil, "backend addresses IP:PORT, comma-separated or repeated; replaces the list ('' for none; default: keep)")
	fs.StringSlice("weights", nil, "backend weights 0..65535: one per backend (W,...), or ADDR=W,... for the backends named (default: kept, 100 for new ones)")
	fs.StringSlice("states", nil, "backend states active, terminating, quarantined or maintenance, one per backend (default: kept)")
	fs.String("type", "", "service type: ClusterIP, NodePort, ExternalIPs, LoadBalancer, HostPort or LocalRedirect (default: kept, ClusterIP for a new service)")
	fs.String("ext-traffic-policy", "", "Cluster or Local: traffic from outside the node goes to every backend or to node-local ones only (default: kept, Cluster for a new service)")
	fs.String("int-traffic-policy", "", "Cluster or Local: traffic from the node itself goes to every backend or to node-local ones only (default: kept, Cluster for a new service)")
	fs.Int64("affinity-timeout", 0, "session affinity (ClientIP) timeout in seconds, 1..16777215; 0 turns affinity off (default: kept, off for a new service)")
	fs.String("lb-algorithm", "", "default, random or maglev (maglev: the packet datapath uses the Maglev table; the socket LB ignores it yet; default: kept)")
	fs.StringSlice("source-ranges", nil, "CIDRs (comma-separated) of the clients the packet datapath lets reach the service from outside (loadBalancerSourceRanges; '' for none: everyone; default: kept)")
	fs.Bool("source-ranges-deny", false, "make --source-ranges a deny list: every client but those (default: kept)")
	fs.Bool("dsr", false, "the packet datapath (--datapath-devices) forwards by L2 direct server return: backends hold the frontend address on their loopback and answer clients directly (default: kept, SNAT/DNAT for a new service)")
	fs.StringSlice("node-local", nil, "the backends (IP:PORT, comma-separated) that run on this node; the others do not ('' for none; default: kept)")
}

// updateFlags are service update's flags, parsed and checked; a nil
// slice or "" means the flag was not given.
type updateFlags struct {
	id       lb.ServiceID
	frontend *lb.L3n4Addr
	backends []lb.Backend // nil: keep; empty: none
	weights  []uint16
	// weightsByAddr are the weights given as ADDR=W, by backendKey.
	weightsByAddr map[string]uint16
	states        []lb.BackendState
	typ           string
	extPolicy     string
	intPolicy     string
	// affinity is the --affinity-timeout given (nil: kept; 0: off).
	affinity *uint32
	alg      string
	dsr      *bool
	ranges   []string // nil: not given
	rangesOK bool     // --source-ranges given
	deny     *bool
	// nodeLocal are the backends of --node-local by backendKey (nil: not
	// given).
	nodeLocal map[string]bool
}

// parseUpdateFlags checks service update's flags without the agent.
func parseUpdateFlags(fs *pflag.FlagSet) (*updateFlags, error) {
	idStr, _ := fs.GetString("id")
	feStr, _ := fs.GetString("frontend")
	backends, _ := fs.GetStringSlice("backends")
	weights, _ := fs.GetStringSlice("weights")
	states, _ := fs.GetStringSlice("states")
	typ, _ := fs.GetString("type")
	if idStr == "" {
		return nil, errors.New("--id is required")
	}
	u := &updateFlags{}
	id, err := lb.ParseServiceID(idStr)
	if err != nil {
		return nil, fmt.Errorf("--id: %w", err)
	}
	u.id = id
	if feStr != "" {
		fe, err := lb.ParseL3n4Addr(feStr)
		if err != nil {
			return nil, fmt.Errorf("--frontend: %w", err)
		}
		u.frontend = &fe
	}
	if fs.Changed("backends") {
		u.backends = []lb.Backend{}
		for _, s := range backends {
			be, err := lb.ParseBackend(s)
			if err != nil {
				return nil, fmt.Errorf("--backends: %w", err)
			}
			if strings.Contains(s, "/") && u.frontend != nil && be.Protocol != u.frontend.Protocol {
				return nil, fmt.Errorf("--backends %s: protocol %s differs from the frontend's %s (backends take the frontend's protocol; leave it out)",
					s, be.Protocol, u.frontend.Protocol)
			}
			u.backends = append(u.backends, be)
		}
		if len(weights) > 0 && !strings.Contains(weights[0], "=") && len(weights) != len(backends) {
			return nil, fmt.Errorf("--weights has %d values for %d backends (give one per backend)", len(weights), len(backends))
		}
		if len(states) > 0 && len(states) != len(backends) {
			return nil, fmt.Errorf("--states has %d values for %d backends (give one per backend)", len(states), len(backends))
		}
	}
	if err := u.parseWeights(weights); err != nil {
		return nil, err
	}
	if err := u.parseOptions(fs); err != nil {
		return nil, err
	}
	for _, s := range states {
		st, err := lb.ParseBackendState(s)
		if err != nil {
			return nil, fmt.Errorf("--states: %w", err)
		}
		u.states = append(u.states, st)
	}
	if typ != "" {
		if _, err := lb.ParseServiceType(typ); err != nil {
			return nil, fmt.Errorf("--type: %w", err)
		}
		u.typ = typ
	}
	return u, nil
}

// parseWeights reads --weights: W,... (one per backend) or ADDR=W,...
func (u *updateFlags) parseWeights(weights []string) error {
	byAddr := len(weights) > 0 && strings.Contains(weights[0], "=")
	if byAddr {
		u.weightsByAddr = map[string]uint16{}
	}
	for _, w := range weights {
		addr, num, named := strings.Cut(w, "=")
		if named != byAddr {
			return fmt.Errorf("--weights: %q: give every weight as W or every one as ADDR=W, not both", w)
		}
		if !named {
			num = addr
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return fmt.Errorf("--weights: invalid weight %q: not a decimal number", num)
		}
		bw, err := lb.NewBackendWeight(n)
		if err != nil {
			return fmt.Errorf("--weights: %w", err)
		}
		if !named {
			u.weights = append(u.weights, bw)
			continue
		}
		be, err := lb.ParseBackend(addr)
		if err != nil {
			return fmt.Errorf("--weights %s: %w", w, err)
		}
		k := backendKey(be.Addr.String(), be.Port)
		if _, dup := u.weightsByAddr[k]; dup {
			return fmt.Errorf("--weights: %s is given twice", addr)
		}
		u.weightsByAddr[k] = bw
	}
	return nil
}

// parsePolicyFlag checks a --*-traffic-policy value and returns its
// canonical spelling.
func parsePolicyFlag(flag, v string) (string, error) {
	switch {
	case strings.EqualFold(v, api.PolicyCluster):
		return api.PolicyCluster, nil
	case strings.EqualFold(v, api.PolicyLocal):
		return api.PolicyLocal, nil
	}
	return "", fmt.Errorf("--%s: invalid policy %q: must be Cluster or Local", flag, v)
}

// parseOptions reads the service options: policies, affinity, algorithm.
func (u *updateFlags) parseOptions(fs *pflag.FlagSet) error {
	var err error
	if fs.Changed("ext-traffic-policy") {
		v, _ := fs.GetString("ext-traffic-policy")
		if u.extPolicy, err = parsePolicyFlag("ext-traffic-policy", v); err != nil {
			return err
		}
	}
	if fs.Changed("int-traffic-policy") {
		v, _ := fs.GetString("int-traffic-policy")
		if u.intPolicy, err = parsePolicyFlag("int-traffic-policy", v); err != nil {
			return err
		}
	}
	if fs.Changed("affinity-timeout") {
		n, _ := fs.GetInt64("affinity-timeout")
		if n < 0 || n > int64(lb.MaxSessionAffinityTimeout) {
			return fmt.Errorf("--affinity-timeout: invalid session-affinity-timeout \"%d\": timeout must be 0 (off) or 1..16777215 seconds", n)
		}
		t := uint32(n)
		u.affinity = &t
	}
	if fs.Changed("node-local") {
		list, _ := fs.GetStringSlice("node-local")
		u.nodeLocal = map[string]bool{}
		for _, a := range list {
			be, err := lb.ParseBackend(a)
			if err != nil {
				return fmt.Errorf("--node-local: %w", err)
			}
			u.nodeLocal[backendKey(be.Addr.String(), be.Port)] = true
		}
	}
	if fs.Changed("lb-algorithm") {
		v, _ := fs.GetString("lb-algorithm")
		a, err := lb.ParseLBAlgorithm(v)
		if err != nil {
			return fmt.Errorf("--lb-algorithm: %w", err)
		}
		u.alg = a.String()
	}
	if fs.Changed("dsr") {
		v, _ := fs.GetBool("dsr")
		u.dsr = &v
	}
	if fs.Changed("source-ranges") {
		v, _ := fs.GetStringSlice("source-ranges")
		u.ranges, u.rangesOK = []string{}, true
		for _, r := range v {
			if r = strings.TrimSpace(r); r != "" {
				u.ranges = append(u.ranges, r)
			}
		}
	}
	if fs.Changed("source-ranges-deny") {
		v, _ := fs.GetBool("source-ranges-deny")
		u.deny = &v
	}
	return nil
}

// frontendSpec is fe as the API spells it.
func frontendSpec(fe lb.L3n4Addr) *api.FrontendAddress {
	return &api.FrontendAddress{IP: fe.Addr.String(), Port: fe.Port, Protocol: strings.ToLower(fe.Protocol.String()), Scope: fe.Scope.String()}
}

// backendKey identifies a backend of a spec by address.
func backendKey(ip string, port uint16) string { return hostPort(ip, port) }

// merge returns the spec to write: cur (the service as the agent holds it,
// nil if it does not exist) changed by u. shared gives the state of
// backends in other services (by backendKey), for backends new to this one.
func (u *updateFlags) merge(cur *api.ServiceSpec, shared map[string]string) (*api.ServiceSpec, error) {
	spec := &api.ServiceSpec{ID: int64(u.id), BackendAddresses: []api.BackendAddress{}, Flags: &api.ServiceFlags{Type: lb.SVCTypeClusterIP.String()}}
	if cur != nil {
		c := *cur
		spec.FrontendAddress = c.FrontendAddress
		spec.BackendAddresses = append(spec.BackendAddresses, c.BackendAddresses...)
		if c.Flags != nil {
			f := *c.Flags
			spec.Flags = &f
		}
	}
	switch {
	case u.frontend != nil:
		fe := frontendSpec(*u.frontend)
		if cur != nil && cur.FrontendAddress != nil && frontendString(fe) != frontendString(cur.FrontendAddress) {
			return nil, fmt.Errorf("--frontend %s: service %d has frontend %s, and a service's frontend never changes (leave --frontend out, or delete the service and create it again)",
				frontendString(fe), u.id, frontendString(cur.FrontendAddress))
		}
		spec.FrontendAddress = fe
	case cur == nil:
		return nil, fmt.Errorf("--frontend is required to create service %d (it does not exist)", u.id)
	}
	if u.backends != nil {
		old := map[string]api.BackendAddress{}
		for _, b := range spec.BackendAddresses {
			old[backendKey(b.IP, b.Port)] = b
		}
		spec.BackendAddresses = []api.BackendAddress{}
		for _, be := range u.backends {
			b := api.BackendAddress{IP: be.Addr.String(), Port: be.Port}
			if o, ok := old[backendKey(b.IP, b.Port)]; ok {
				b.Weight, b.State, b.NodeLocal = o.Weight, o.State, o.NodeLocal
			} else if st, ok := shared[backendKey(b.IP, b.Port)]; ok {
				b.State = st
			}
			spec.BackendAddresses = append(spec.BackendAddresses, b)
		}
	}
	n := len(spec.BackendAddresses)
	if len(u.weights) > 0 && len(u.weights) != n {
		return nil, fmt.Errorf("--weights has %d values for the %d backends of service %d (give one per backend, in the order 'actorlb service get %d' shows)", len(u.weights), n, u.id, u.id)
	}
	if len(u.states) > 0 && len(u.states) != n {
		return nil, fmt.Errorf("--states has %d values for the %d backends of service %d (give one per backend, in the order 'actorlb service get %d' shows)", len(u.states), n, u.id, u.id)
	}
	seen := map[string]bool{}
	for i, b := range spec.BackendAddresses {
		if w, ok := u.weightsByAddr[backendKey(b.IP, b.Port)]; ok {
			spec.BackendAddresses[i].Weight = &w
			seen[backendKey(b.IP, b.Port)] = true
		}
		if len(u.weights) > 0 {
			w := u.weights[i]
			spec.BackendAddresses[i].Weight = &w
		}
		if len(u.states) > 0 {
			spec.BackendAddresses[i].State = u.states[i].String()
		}
	}
	for k := range u.weightsByAddr {
		if !seen[k] {
			return nil, fmt.Errorf("--weights %s=...: service %d has no backend %s", k, u.id, k)
		}
	}
	if u.nodeLocal != nil {
		found := 0
		for i, b := range spec.BackendAddresses {
			local := u.nodeLocal[backendKey(b.IP, b.Port)]
			spec.BackendAddresses[i].NodeLocal = local
			if local {
				found++
			}
		}
		if found != len(u.nodeLocal) {
			for k := range u.nodeLocal {
				if !slices.ContainsFunc(spec.BackendAddresses, func(b api.BackendAddress) bool { return backendKey(b.IP, b.Port) == k }) {
					return nil, fmt.Errorf("--node-local %s: service %d has no backend %s", k, u.id, k)
				}
			}
		}
	}
	if u.typ != "" {
		spec.Flags.Type = u.typ
	}
	if u.extPolicy != "" {
		// trafficPolicy is upstream's name of the same field: left in, a
		// stale value would disagree with the new one.
		spec.Flags.ExtTrafficPolicy, spec.Flags.TrafficPolicy = u.extPolicy, ""
	}
	if u.intPolicy != "" {
		spec.Flags.IntTrafficPolicy = u.intPolicy
	}
	if u.affinity != nil {
		spec.Flags.SessionAffinity, spec.Flags.SessionAffinityTimeout = *u.affinity != 0, *u.affinity
	}
	if u.dsr != nil {
		spec.Flags.DSR = *u.dsr
	}
	if u.rangesOK {
		spec.Flags.SourceRanges = u.ranges
	}
	if u.deny != nil {
		spec.Flags.SourceRangesDeny = *u.deny
	}
	if u.alg != "" {
		spec.Flags.LBAlgorithm = u.alg
	}
	return spec, nil
}

// needsShared says whether merge needs the states of backends in other
// services: new backends without --states.
func (u *updateFlags) needsShared(cur *api.ServiceSpec) bool {
	if u.backends == nil || len(u.states) > 0 {
		return false
	}
	have := map[string]bool{}
	if cur != nil {
		for _, b := range cur.BackendAddresses {
			have[backendKey(b.IP, b.Port)] = true
		}
	}
	for _, be := range u.backends {
		if !have[backendKey(be.Addr.String(), be.Port)] {
			return true
		}
	}
	return false
}

// sharedStates returns the state of every backend of svcs by address.
func sharedStates(svcs []*api.Service) map[string]string {
	out := map[string]string{}
	for _, s := range svcs {
		for _, b := range s.Spec.BackendAddresses {
			out[backendKey(b.IP, b.Port)] = b.State
		}
	}
	return out
}

func runServiceUpdate(ctx context.Context, e *env, args []string) error {
	if err := wantArgs("service update", args, 0, "only flags"); err != nil {
		return err
	}
	usage := func(err error) error {
		return &usageError{fmt.Errorf("service update: %w (run 'actorlb service update --help')", err)}
	}
	u, err := parseUpdateFlags(e.fs)
	if err != nil {
		return usage(err)
	}
	out, c, err := e.outputAndClient()
	if err != nil {
		return err
	}
	defer c.Close()
	var cur *api.ServiceSpec
	switch svc, err := c.GetService(ctx, u.id); {
	case err == nil:
		cur = svc.Spec
	case !errors.Is(err, api.ErrNotFound):
		return err
	}
	var shared map[string]string
	if u.needsShared(cur) {
		svcs, err := c.ListServices(ctx)
		if err != nil {
			return err
		}
		shared = sharedStates(svcs)
	}
	spec, err := u.merge(cur, shared)
	if err != nil {
		return usage(err)
	}
	svc, created, err := c.PutService(ctx, u.id, spec)
	if err != nil {
		return flagError(err)
	}
	if isData(out) {
		return e.write(out, struct {
			Created bool         `json:"created"`
			Service *api.Service `json:"service"`
		}{created, svc})
	}
	verb := "Updated"
	if created {
		verb = "Created"
	}
	fmt.Fprintf(e.stdout, "%s service %d: %s with %s\n", verb, u.id, frontendString(svc.Spec.FrontendAddress),
		plural(len(svc.Spec.BackendAddresses), "backend", "backends"))
	printWarnings(e, svc)
	return nil
}

// printWarnings writes the warnings of the agent's answer to stderr.
func printWarnings(e *env, svc *api.Service) {
	if svc == nil || svc.Status == nil {
		return
	}
	for _, w := range svc.Status.Warnings {
		fmt.Fprintf(e.stderr, "actorlb: warning: service %d: %s\n", svc.Spec.ID, w)
	}
}
