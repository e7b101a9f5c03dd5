package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/actorlb/actorlb/api"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/spf13/pflag"
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

func serviceDeleteCommand() *command {
	return &command{
		use:   "service delete (ID | --all) [flags]",
		short: "delete one service or all of them",
		long: `Deletes the service with ID, or with --all every service: its master and
slots, the backends no other service uses and its revNAT entry. Exits 1 if
there is no service with ID.`,
		examples: `  actorlb service delete 1
  actorlb service delete --all`,
		flags: func(fs *pflag.FlagSet) {
			fs.Bool("all", false, "delete every service")
		},
		run: func(ctx context.Context, e *env, args []string) error {
			all, _ := e.fs.GetBool("all")
			if all && len(args) > 0 || !all && len(args) != 1 {
				return &usageError{errors.New("service delete: give one service ID or --all (run 'actorlb service delete --help')")}
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			var ids []lb.ServiceID
			if !all {
				id, err := lb.ParseServiceID(args[0])
				if err != nil {
					return &usageError{fmt.Errorf("service delete: %w", err)}
				}
				ids = append(ids, id)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if all {
				svcs, err := c.ListServices(ctx)
				if err != nil {
					return err
				}
				for _, s := range svcs {
					ids = append(ids, lb.ServiceID(s.Spec.ID))
				}
			}
			deleted := []lb.ServiceID{}
			for _, id := range ids {
				err := c.DeleteService(ctx, id)
				switch {
				case err == nil:
					deleted = append(deleted, id)
				case errors.Is(err, api.ErrNotFound) && all:
					// Deleted meanwhile by someone else: nothing to do.
				case errors.Is(err, api.ErrNotFound):
					return fmt.Errorf("service %d not found (list them with 'actorlb service list')", id)
				default:
					return err
				}
			}
			if out == outJSON {
				return writeJSON(e.stdout, struct {
					Deleted []lb.ServiceID `json:"deleted"`
				}{deleted})
			}
			if all {
				fmt.Fprintf(e.stdout, "Deleted %s\n", plural(len(deleted), "service", "services"))
			} else {
				fmt.Fprintf(e.stdout, "Deleted service %d\n", deleted[0])
			}
			return nil
		},
	}
}

func serviceApplyCommand() *command {
	return &command{
		use:   "service apply --file FILE [flags]",
		short: "create or update many services from a JSON file",
		long: `Creates or updates every service of FILE, a JSON array of service specs as
PUT /v1/service/{id} takes them, each with its "id" (see the API's
/v1/openapi.json), in one call: new services are created together, much
faster than one 'service update' each. Prints one line per service: its ID
and "created", "updated" or the error. Exits 1 if any failed. FILE "-" is
standard input.`,
		examples: `  actorlb service apply --file services.json
  echo '[{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80},
         "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]}]' | actorlb service apply -f -`,
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("file", "f", "", "JSON array of service specs to apply (- for standard input)")
		},
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("service apply", args, 0, "no arguments (the services come from --file)"); err != nil {
				return err
			}
			file, _ := e.fs.GetString("file")
			if file == "" {
				return &usageError{errors.New("service apply: --file is required (run 'actorlb service apply --help')")}
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			var data []byte
			if file == "-" {
				data, err = io.ReadAll(os.Stdin)
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("service apply: read %s: %w", file, err)
			}
			// As strict as the API: a misspelled field is an error, not a
			// service created without what it meant.
			var specs []api.ServiceSpec
			if err := api.DecodeStrict(data, &specs); err != nil {
				return &usageError{fmt.Errorf("service apply: %s: want a JSON array of service specs: %w (nothing was applied)", file, err)}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			defer c.Close()
			results, err := c.PutServices(ctx, specs)
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				if r.Code >= 300 {
					failed++
				}
			}
			if out == outJSON {
				if err := writeJSON(e.stdout, results); err != nil {
					return err
				}
			} else {
				tw := newTable(e.stdout)
				fmt.Fprintln(tw, "ID\tRESULT")
				for _, r := range results {
					res := r.Error
					switch r.Code {
					case http.StatusCreated:
						res = "created"
					case http.StatusOK:
						res = "updated"
					}
					fmt.Fprintf(tw, "%d\t%s\n", r.ID, res)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("service apply: %d of %d services failed", failed, len(results))
			}
			return nil
		},
	}
}
