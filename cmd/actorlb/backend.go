package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/actorlb/actorlb/api"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// backendRow is one backend of `backend list`: its address, its state
// (shared by every service that uses it) and the services.
type backendRow struct {
	Address  string  `json:"address"`
	State    string  `json:"state"`
	Services []int64 `json:"services"`
}

// backendRows gathers the backends of svcs by address, sorted.
func backendRows(svcs []*api.Service) []backendRow {
	byAddr := map[string]*backendRow{}
	for _, s := range svcs {
		for _, b := range s.Spec.BackendAddresses {
			k := backendKey(b.IP, b.Port)
			r := byAddr[k]
			if r == nil {
				r = &backendRow{Address: k, State: b.State}
				byAddr[k] = r
			}
			r.Services = append(r.Services, s.Spec.ID)
		}
	}
	rows := make([]backendRow, 0, len(byAddr))
	for _, r := range byAddr {
		slices.Sort(r.Services)
		rows = append(rows, *r)
	}
	slices.SortFunc(rows, func(a, b backendRow) int { return cmp.Compare(a.Address, b.Address) })
	return rows
}

func idList(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

func backendListCommand() *command {
	return &command{
		use:   "backend list [flags]",
		short: "list every backend with its state and the services that use it",
		long: `Lists the backends of every service the agent holds, one line per address:
its state and the IDs of the services that use it. A backend's state is
shared: it is the same in every service that uses the backend (change it
with 'actorlb backend set-state'). Needs a running agent (see -H).`,
		examples: `  actorlb backend list
  actorlb backend list -o json`,
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("backend list", args, 0, "no arguments"); err != nil {
				return err
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
			rows := backendRows(svcs)
			if isData(out) {
				return e.write(out, rows)
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "ADDRESS\tSTATE\tSERVICES")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Address, r.State, idList(r.Services))
			}
			return tw.Flush()
		},
	}
}

func backendSetStateCommand() *command {
	return &command{
		use:   "backend set-state ADDR STATE [flags]",
		short: "change a backend's state in every service that uses it",
		long: `Sets the state of the backend at ADDR (IP:PORT) to STATE: active,
terminating, quarantined or maintenance. A backend's state is shared by
every service that uses it, so the change applies to all of them, in one
call; the command says which services it changed. The agent refuses the
transitions the datapath does not allow (from terminating back to active,
say) and then nothing changes.`,
		examples: `  actorlb backend set-state 10.0.1.5:8080 quarantined
  actorlb backend set-state [fd00::1]:8443 maintenance
  actorlb backend set-state 10.0.1.5:8080 active`,
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("backend set-state", args, 2, "ADDR and STATE"); err != nil {
				return err
			}
			be, err := lb.ParseBackend(args[0])
			if err != nil {
				return &usageError{fmt.Errorf("backend set-state: %w", err)}
			}
			st, err := lb.ParseBackendState(args[1])
			if err != nil {
				return &usageError{fmt.Errorf("backend set-state: %w", err)}
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
			key := backendKey(be.Addr.String(), be.Port)
			var specs []api.ServiceSpec
			for _, s := range svcs {
				spec := *s.Spec
				spec.BackendAddresses = slices.Clone(spec.BackendAddresses)
				found := false
				for i, b := range spec.BackendAddresses {
					if backendKey(b.IP, b.Port) == key {
						spec.BackendAddresses[i].State = st.String()
						found = true
					}
				}
				if found {
					specs = append(specs, spec)
				}
			}
			if len(specs) == 0 {
				return fmt.Errorf("backend set-state: no service uses backend %s (list them with 'actorlb backend list')", key)
			}
			results, err := c.PutServices(ctx, specs)
			if err != nil {
				return err
			}
			var changed []int64
			var failed []string
			for _, r := range results {
				if r.Code >= 300 {
					failed = append(failed, fmt.Sprintf("service %d: %s", r.ID, r.Error))
				} else {
					changed = append(changed, r.ID)
				}
			}
			if isData(out) {
				if err := e.write(out, struct {
					Address  string   `json:"address"`
					State    string   `json:"state"`
					Services []int64  `json:"services"`
					Failed   []string `json:"failed,omitempty"`
				}{key, st.String(), changed, failed}); err != nil {
					return err
				}
			} else if len(changed) > 0 {
				fmt.Fprintf(e.stdout, "Backend %s is %s in %s (%s): a backend's state is shared by every service that uses it\n",
					key, st, plural(len(changed), "service", "services"), idList(changed))
			}
			if len(failed) > 0 {
				return fmt.Errorf("backend set-state: %s", strings.Join(failed, "; "))
			}
			return nil
		},
	}
}
