package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/actorlb/actorlb/api"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/spf13/pflag"
)

func serviceCreateCommand() *command {
	return &command{
		use:   "service create --id ID (--frontend ADDR | --type NodePort --node-port PORT[/PROTOCOL]) [flags]",
		short: "create a service (refused if its ID exists)",
		long: `Creates the service with --id and --frontend, with the options given
(the same flags as 'service update', which also creates but changes an
existing service instead of refusing it). Nothing is changed when the agent
refuses the request.

NodePort: --type NodePort --node-port PORT[/PROTOCOL] creates one service
per frontend of the node port: the surrogate (0.0.0.0, or :: for IPv6
backends), which the datapath uses for any local address, then one per node
address of the backends' family that the agent reports (its
--node-addresses, see GET /v1/config): N+1 services with IDs --id, --id+1,
... --id+N, each with the same backends and options. Every one of those IDs
must be free; if one creation fails, those created before it are deleted.
The agent refuses a node port outside its --node-port-range (default
30000-32767). --type NodePort --frontend ADDR creates that one frontend only.

Addresses are IP:PORT[/PROTOCOL[/SCOPE]]; see 'service update --help' for
--backends, --weights, --states and the options.`,
		examples: `  actorlb service create --id 1 --frontend 10.96.0.10:80 --backends 10.0.1.5:8080,10.0.1.6:8080
  actorlb service create --id 10 --type NodePort --node-port 30080 --backends 10.0.1.5:8080
  actorlb service create --id 20 --type NodePort --node-port 30053/udp --backends 10.0.1.7:53 --ext-traffic-policy Local
  actorlb service create --id 2 --frontend 192.0.2.10:443 --type LoadBalancer --backends 10.0.1.5:8443,10.0.1.6:8443 --weights 10.0.1.5:8443=300
  actorlb service create --id 3 --frontend 10.96.0.11:80 --backends 10.0.1.5:8080 --affinity-timeout 600 --int-traffic-policy Local`,
		flags: func(fs *pflag.FlagSet) {
			fs.String("id", "", "service ID, 1..65535 (required; with --node-port the first of N+1 consecutive IDs)")
			fs.String("frontend", "", "frontend address IP:PORT[/PROTOCOL[/SCOPE]] (required unless --node-port)")
			fs.String("node-port", "", "PORT[/PROTOCOL]: with --type NodePort, create the surrogate and one frontend per node address the agent reports")
			serviceSpecFlags(fs)
		},
		run: runServiceCreate,
	}
}

// parseNodePort reads --node-port PORT[/PROTOCOL] as the surrogate of
// the family of v6.
func parseNodePort(s string, v6 bool) (lb.L3n4Addr, error) {
	ip := "0.0.0.0"
	if v6 {
		ip = "[::]"
	}
	a, err := lb.ParseL3n4Addr(ip + ":" + s)
	if err != nil {
		var ve *lb.ValidationError
		if errors.As(err, &ve) {
			return lb.L3n4Addr{}, fmt.Errorf("--node-port: invalid node-port %q: %s", s, ve.Reason)
		}
		return lb.L3n4Addr{}, fmt.Errorf("--node-port: %w", err)
	}
	if a.Scope != lb.ScopeExternal || strings.Count(s, "/") > 1 {
		return lb.L3n4Addr{}, fmt.Errorf("--node-port: invalid node-port %q: want PORT[/PROTOCOL]", s)
	}
	return a, nil
}

func runServiceCreate(ctx context.Context, e *env, args []string) error {
	if err := wantArgs("service create", args, 0, "only flags"); err != nil {
		return err
	}
	usage := func(err error) error {
		return &usageError{fmt.Errorf("service create: %w (run 'actorlb service create --help')", err)}
	}
	u, err := parseUpdateFlags(e.fs)
	if err != nil {
		return usage(err)
	}
	nodePort, _ := e.fs.GetString("node-port")
	switch {
	case nodePort != "" && u.frontend != nil:
		return usage(errors.New("give --frontend or --node-port, not both"))
	case nodePort != "" && u.typ == "":
		return usage(errors.New("--node-port needs --type NodePort"))
	case nodePort != "":
		if t, _ := lb.ParseServiceType(u.typ); t != lb.SVCTypeNodePort {
			return usage(fmt.Errorf("--node-port needs --type NodePort, not %s", u.typ))
		}
		v6 := len(u.backends) > 0 && u.backends[0].Addr.Is6()
		fe, err := parseNodePort(nodePort, v6)
		if err != nil {
			return usage(err)
		}
		u.frontend = &fe
	case u.frontend == nil:
		return usage(errors.New("--frontend (or --type NodePort --node-port PORT) is required"))
	}
	out, c, err := e.outputAndClient()
	if err != nil {
		return err
	}
	defer c.Close()

	frontends := []lb.L3n4Addr{*u.frontend}
	if nodePort != "" {
		cfg, err := c.Config(ctx)
		if err != nil {
			return fmt.Errorf("service create: ask the agent for its node addresses: %w", err)
		}
		var addrs []netip.Addr
		for _, s := range cfg.Status.NodeAddresses {
			if a, err := netip.ParseAddr(s); err == nil {
				addrs = append(addrs, a)
			}
		}
		frontends = lb.NodePortFrontends(*u.frontend, addrs)
	}
	if int(u.id)+len(frontends)-1 > int(lb.MaxServiceID) {
		return usage(fmt.Errorf("--id %d: the %d services of node port %s need IDs %d..%d, above 65535", u.id, len(frontends), nodePort, u.id, int(u.id)+len(frontends)-1))
	}
	svcs, err := c.ListServices(ctx)
	if err != nil {
		return err
	}
	taken := map[int64]*api.Service{}
	for _, s := range svcs {
		taken[s.Spec.ID] = s
	}
	for i := range frontends {
		if s, ok := taken[int64(u.id)+int64(i)]; ok {
			return fmt.Errorf("service create: service %d exists (%s): nothing created (use 'actorlb service update' to change it, or another --id)",
				s.Spec.ID, frontendString(s.Spec.FrontendAddress))
		}
	}
	shared := sharedStates(svcs)

	var created []*api.Service
	for i, fe := range frontends {
		one := *u
		one.id = u.id + lb.ServiceID(i)
		one.frontend = &fe
		spec, err := one.merge(nil, shared)
		if err != nil {
			return usage(err)
		}
		svc, _, err := c.PutService(ctx, one.id, spec)
		if err != nil {
			err = flagError(err)
			if nodePort != "" {
				// The frontends came from --node-port, not --frontend.
				err = &mappedError{msg: strings.ReplaceAll(err.Error(), "--frontend", "--node-port"), err: err}
			}
			return errors.Join(err, undoCreate(ctx, c, created))
		}
		created = append(created, svc)
	}
	if isData(out) {
		return e.write(out, struct {
			Created []*api.Service `json:"created"`
		}{created})
	}
	if len(created) == 1 {
		svc := created[0]
		fmt.Fprintf(e.stdout, "Created service %d: %s with %s\n", svc.Spec.ID, frontendString(svc.Spec.FrontendAddress),
			plural(len(svc.Spec.BackendAddresses), "backend", "backends"))
	} else {
		fmt.Fprintf(e.stdout, "Created %d services for node port %s (the surrogate and %s the agent reports), each with %s:\n",
			len(created), nodePort, plural(len(created)-1, "node address", "node addresses"),
			plural(len(created[0].Spec.BackendAddresses), "backend", "backends"))
		for _, svc := range created {
			fmt.Fprintf(e.stdout, "  service %d: %s\n", svc.Spec.ID, frontendString(svc.Spec.FrontendAddress))
		}
	}
	printWarnings(e, created[0]) // every one has the same options
	return nil
}

// undoCreate deletes the services a failed create made before failing.
func undoCreate(ctx context.Context, c *api.Client, created []*api.Service) error {
	var errs []error
	for _, s := range created {
		if err := c.DeleteService(ctx, lb.ServiceID(s.Spec.ID)); err != nil {
			errs = append(errs, fmt.Errorf("undo: delete service %d created before the failure: %w", s.Spec.ID, err))
		}
	}
	return errors.Join(errs...)
}
