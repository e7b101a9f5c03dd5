package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/actorlb/actorlb/api"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

func serviceListCommand() *command {
	return &command{
		use:   "service list [flags]",
		short: "list every service with its backends",
		long: `Lists the services the agent holds, sorted by ID, with their frontend,
type and backends in slot order (active, terminating, quarantined, then
maintenance). Needs a running agent (see -H).`,
		examples: `  actorlb service list
  actorlb service list -o json | jq '.[].spec.id'
  actorlb service list -H http://127.0.0.1:8080`,
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("service list", args, 0, "no arguments"); err != nil {
				return err
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			defer c.Close()
			svcs, err := c.ListServices(ctx)
			if err != nil {
				return err
			}
			if out == outJSON {
				return writeJSON(e.stdout, svcs)
			}
			return printServices(e.stdout, svcs)
		},
	}
}

func serviceGetCommand() *command {
	return &command{
		use:   "service get ID [flags]",
		short: "show one service",
		long: `Shows the service with ID (1..65535): frontend, type, traffic policies and
backends in slot order. Exits 1 if there is no such service.`,
		examples: `  actorlb service get 1
  actorlb service get 1 -o json`,
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("service get", args, 1, "one service ID"); err != nil {
				return err
			}
			id, err := lb.ParseServiceID(args[0])
			if err != nil {
				return &usageError{fmt.Errorf("service get: %w", err)}
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			defer c.Close()
			svc, err := c.GetService(ctx, id)
			if err != nil {
				if errors.Is(err, api.ErrNotFound) {
					return fmt.Errorf("service %d not found (list them with 'actorlb service list')", id)
				}
				return err
			}
			if out == outJSON {
				return writeJSON(e.stdout, svc)
			}
			return printServices(e.stdout, []*api.Service{svc})
		},
	}
}

// frontendString formats a FrontendAddress as lb.L3n4Addr.String does.
func frontendString(fe *api.FrontendAddress) string {
	if fe == nil {
		return "-"
	}
	addr, _ := netip.ParseAddr(fe.IP)
	proto, _ := lb.ParseL4Type(fe.Protocol)
	scope, _ := lb.ParseScope(fe.Scope)
	return lb.NewL3n4Addr(addr, fe.Port, proto, scope).String()
}

func hostPort(ip string, port uint16) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + strconv.Itoa(int(port))
	}
	return ip + ":" + strconv.Itoa(int(port))
}

func serviceOptions(f *api.ServiceFlags) string {
	if f == nil {
		return "ClusterIP"
	}
	parts := []string{f.Type}
	if f.ExtTrafficPolicy == api.PolicyLocal {
		parts = append(parts, "ext-local")
	}
	if f.IntTrafficPolicy == api.PolicyLocal {
		parts = append(parts, "int-local")
	}
	if f.SessionAffinity {
		parts = append(parts, fmt.Sprintf("affinity %ds", f.SessionAffinityTimeout))
	}
	if f.LBAlgorithm != "" && f.LBAlgorithm != lb.LBAlgDefault.String() {
		parts = append(parts, f.LBAlgorithm)
	}
	return strings.Join(parts, ", ")
}

func printServices(w io.Writer, svcs []*api.Service) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tFRONTEND\tTYPE\tBACKEND")
	for _, s := range svcs {
		spec := s.Spec
		head := fmt.Sprintf("%d\t%s\t%s\t", spec.ID, frontendString(spec.FrontendAddress), serviceOptions(spec.Flags))
		if len(spec.BackendAddresses) == 0 {
			fmt.Fprintln(tw, head+"(none)")
			continue
		}
		for i, b := range spec.BackendAddresses {
			weight := "100"
			if b.Weight != nil {
				weight = strconv.Itoa(int(*b.Weight))
			}
			line := fmt.Sprintf("%d => %s (%s, weight %s)", i+1, hostPort(b.IP, b.Port), b.State, weight)
			if i == 0 {
				fmt.Fprintln(tw, head+line)
			} else {
				fmt.Fprintln(tw, "\t\t\t"+line)
			}
		}
	}
	return tw.Flush()
}
