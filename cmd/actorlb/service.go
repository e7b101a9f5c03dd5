package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"net/netip"
	"slices"
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
maintenance). Needs a running agent (see -H).

--frontend, --backend and --type keep only the services that match (all
given must match): an address is IP:PORT[/PROTOCOL] or just an IP. -o wide
shows each option of a service in its own column.`,
		examples: `  actorlb service list
  actorlb service list -o json | jq '.[].spec.id'
  actorlb service list --frontend 10.96.0.10:80
  actorlb service list --backend 10.0.1.5 -o wide
  actorlb service list --type NodePort -o yaml
  actorlb -H http://127.0.0.1:8080 service list`,
		flags: func(fs *pflag.FlagSet) {
			fs.String("frontend", "", "only the service with this frontend, IP:PORT[/PROTOCOL[/SCOPE]], or the services on this IP")
			fs.String("backend", "", "only the services with this backend, IP:PORT or IP")
			fs.String("type", "", "only the services of this type (ClusterIP, NodePort, ...; case-insensitive)")
		},
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("service list", args, 0, "no arguments"); err != nil {
				return err
			}
			match, err := listFilters(e.fs)
			if err != nil {
				return &usageError{fmt.Errorf("service list: %w", err)}
			}
			out, c, err := e.outputAndClient()
			if err != nil {
				return err
			}
			defer c.Close()
			svcs, err := c.ListServices(ctx)
			if err != nil {
				return err
			}
			svcs = filterServices(svcs, match)
			if isData(out) {
				return e.write(out, svcs)
			}
			return printServices(e.stdout, svcs, out == outWide)
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
			out, c, err := e.outputAndClient()
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
			if isData(out) {
				return e.write(out, svc)
			}
			return printServices(e.stdout, []*api.Service{svc}, out == outWide)
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
		parts = append(parts, algorithmString(f.LBAlgorithm))
	}
	if f.DSR {
		parts = append(parts, "dsr")
	}
	return strings.Join(parts, ", ")
}

// algorithmString is an algorithm as the CLI shows it: maglev is not
// honoured by the socket LB yet, and says so.
func algorithmString(alg string) string {
	if alg == lb.LBAlgMaglev.String() {
		return alg + " (ignored by the socket LB)"
	}
	return alg
}

// sourceOf is the source of a service with flags f: "api" when it says
// none.
func sourceOf(f *api.ServiceFlags) string {
	if f == nil || f.Source == "" {
		return lb.SourceAPI.String()
	}
	return f.Source
}

// sourceString is a service's source as the CLI shows it: "api", or
// "kubernetes ns/name".
func sourceString(f *api.ServiceFlags) string {
	if f == nil || f.Source == "" || f.Name == "" {
		return sourceOf(f)
	}
	return f.Source + " " + f.Namespace + "/" + f.Name
}

func printServices(w io.Writer, svcs []*api.Service, wide bool) error {
	tw := newTable(w)
	// The SOURCE column appears when a service is not the API's.
	withSource := slices.ContainsFunc(svcs, func(s *api.Service) bool {
		return sourceOf(s.Spec.Flags) != lb.SourceAPI.String()
	})
	source := ""
	if withSource {
		source = "SOURCE\t"
	}
	if wide {
		fmt.Fprintln(tw, "ID\tFRONTEND\tTYPE\t"+source+"SCOPE\tEXT-POLICY\tINT-POLICY\tAFFINITY\tALGORITHM\tBACKEND")
	} else {
		fmt.Fprintln(tw, "ID\tFRONTEND\tTYPE\t"+source+"BACKEND")
	}
	for _, s := range svcs {
		spec := s.Spec
		source := ""
		if withSource {
			source = sourceString(spec.Flags) + "\t"
		}
		var head string
		if wide {
			f := spec.Flags
			if f == nil {
				f = &api.ServiceFlags{}
			}
			typ, ext, in, aff, alg := cmp.Or(f.Type, "ClusterIP"), cmp.Or(f.ExtTrafficPolicy, "Cluster"), cmp.Or(f.IntTrafficPolicy, "Cluster"), "-", cmp.Or(f.LBAlgorithm, lb.LBAlgDefault.String())
			if f.SessionAffinity {
				aff = fmt.Sprintf("%ds", f.SessionAffinityTimeout)
			}
			scope := "external"
			if spec.FrontendAddress != nil && spec.FrontendAddress.Scope != "" {
				scope = spec.FrontendAddress.Scope
			}
			head = fmt.Sprintf("%d\t%s\t%s\t%s%s\t%s\t%s\t%s\t%s\t", spec.ID, frontendString(spec.FrontendAddress), typ, source, scope, ext, in, aff, algorithmString(alg))
		} else {
			head = fmt.Sprintf("%d\t%s\t%s\t%s", spec.ID, frontendString(spec.FrontendAddress), serviceOptions(spec.Flags), source)
		}
		pad := strings.Repeat("\t", strings.Count(head, "\t"))
		if len(spec.BackendAddresses) == 0 {
			fmt.Fprintln(tw, head+"(none)")
			continue
		}
		for i, b := range spec.BackendAddresses {
			weight := "100"
			if b.Weight != nil {
				weight = strconv.Itoa(int(*b.Weight))
			}
			local := ""
			if b.NodeLocal {
				local = ", node-local"
			}
			line := fmt.Sprintf("%d => %s (%s, weight %s%s)", i+1, hostPort(b.IP, b.Port), b.State, weight, local)
			if i == 0 {
				fmt.Fprintln(tw, head+line)
			} else {
				fmt.Fprintln(tw, pad+line)
			}
		}
	}
	return tw.Flush()
}

// listFilters returns the match of service list's filter flags.
func listFilters(fs *pflag.FlagSet) (func(*api.Service) bool, error) {
	feStr, _ := fs.GetString("frontend")
	beStr, _ := fs.GetString("backend")
	typ, _ := fs.GetString("type")
	var checks []func(*api.Service) bool
	if feStr != "" {
		if ip, err := netip.ParseAddr(strings.Trim(feStr, "[]")); err == nil {
			checks = append(checks, func(s *api.Service) bool {
				return s.Spec.FrontendAddress != nil && s.Spec.FrontendAddress.IP == ip.String()
			})
		} else {
			fe, err := lb.ParseL3n4Addr(feStr)
			if err != nil {
				return nil, fmt.Errorf("--frontend: %w", err)
			}
			want := frontendString(frontendSpec(fe))
			checks = append(checks, func(s *api.Service) bool { return frontendString(s.Spec.FrontendAddress) == want })
		}
	}
	if beStr != "" {
		var want func(b api.BackendAddress) bool
		if ip, err := netip.ParseAddr(strings.Trim(beStr, "[]")); err == nil {
			want = func(b api.BackendAddress) bool { return b.IP == ip.String() }
		} else {
			be, err := lb.ParseBackend(beStr)
			if err != nil {
				return nil, fmt.Errorf("--backend: %w", err)
			}
			want = func(b api.BackendAddress) bool { return b.IP == be.Addr.String() && b.Port == be.Port }
		}
		checks = append(checks, func(s *api.Service) bool { return slices.ContainsFunc(s.Spec.BackendAddresses, want) })
	}
	if typ != "" {
		t, err := lb.ParseServiceType(typ)
		if err != nil {
			return nil, fmt.Errorf("--type: %w", err)
		}
		checks = append(checks, func(s *api.Service) bool {
			st, _ := lb.ParseServiceType(cmp.Or(cmp.Or(s.Spec.Flags, &api.ServiceFlags{}).Type, "ClusterIP"))
			return st == t
		})
	}
	return func(s *api.Service) bool {
		for _, c := range checks {
			if !c(s) {
				return false
			}
		}
		return true
	}, nil
}

func filterServices(svcs []*api.Service, match func(*api.Service) bool) []*api.Service {
	out := []*api.Service{}
	for _, s := range svcs {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}
