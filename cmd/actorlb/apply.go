package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"

	"github.com/actorlb/actorlb/api"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/spf13/pflag"
)

// Actions of apply, as its output spells them.
const (
	actCreated   = "created"
	actUpdated   = "updated"
	actUnchanged = "unchanged"
	actDeleted   = "deleted"
)

// canonical is spec as the engine would hold it, with its backends sorted,
// to tell an unchanged service; ok is false when spec is invalid (the
// agent then says why).
func canonical(id lb.ServiceID, spec *api.ServiceSpec) (*lb.Service, bool) {
	svc, err := api.ToService(id, spec)
	if err != nil {
		return nil, false
	}
	slices.SortFunc(svc.Backends, func(a, b lb.Backend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
	})
	return svc, true
}

// applyRow is one line of apply's output.
type applyRow struct {
	ID     int64  `json:"id"`
	Result string `json:"result"`
	// Code is the agent's status for the service (0 when nothing was sent).
	Code  int    `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// applyPlan is what apply does: the specs to send (with their index in the
// file) and the IDs to delete.
type applyPlan struct {
	rows   []applyRow // one per spec of the file, then one per deletion
	send   []api.ServiceSpec
	sendAt []int // row of each spec sent
	prune  []lb.ServiceID
}

// plan compares the file's specs with the agent's services.
func plan(specs []api.ServiceSpec, cur []*api.Service, prune bool) *applyPlan {
	have := make(map[int64]*api.ServiceSpec, len(cur))
	for _, s := range cur {
		have[s.Spec.ID] = s.Spec
	}
	p := &applyPlan{}
	inFile := map[int64]bool{}
	for i := range specs {
		spec := &specs[i]
		inFile[spec.ID] = true
		row := applyRow{ID: spec.ID, Result: actCreated}
		if old, ok := have[spec.ID]; ok {
			row.Result = actUpdated
			id := lb.ServiceID(spec.ID)
			a, okA := canonical(id, spec)
			b, okB := canonical(id, old)
			if okA && okB && reflect.DeepEqual(a, b) {
				row.Result = actUnchanged
			}
		}
		p.rows = append(p.rows, row)
		if row.Result != actUnchanged {
			p.send, p.sendAt = append(p.send, *spec), append(p.sendAt, len(p.rows)-1)
		}
	}
	if prune {
		for _, s := range cur {
			if !inFile[s.Spec.ID] && ownedByAPI(s) {
				p.prune = append(p.prune, lb.ServiceID(s.Spec.ID))
			}
		}
	}
	return p
}

// ownedByAPI reports whether s is the API's to change (not another
// source's, such as the Kubernetes sync's).
func ownedByAPI(s *api.Service) bool {
	return s.Spec == nil || sourceOf(s.Spec.Flags) == lb.SourceAPI.String()
}

// counts returns how many rows have each result.
func counts(rows []applyRow) map[string]int {
	n := map[string]int{}
	for _, r := range rows {
		n[r.Result]++
	}
	return n
}

func serviceApplyCommand() *command {
	return &command{
		use:   "service apply --file FILE [--prune] [--dry-run] [flags]",
		short: "create, update (and with --prune delete) services to match a JSON file",
		long: `Makes the agent's services those of FILE, a JSON array of service specs as
PUT /v1/service/{id} takes them, each with its "id" (see the API's
/v1/openapi.json). FILE is decoded as strictly as the API decodes it: an
unknown or misspelled field, a field given twice or of the wrong type is an
error, and nothing is applied. FILE "-" is standard input.

Services that differ from what the agent holds are sent in batches (each
request under the agent's body limit, so any number of services can be
applied); services that are already as FILE says are not sent and are
reported "unchanged". With --prune the services the agent holds that FILE
does not name are deleted, in batch calls of up to 1,000 (only the API's
own: services of the Kubernetes sync are never pruned). With --dry-run nothing is
changed: the command prints what it would do.

Prints one line per service: its ID and "created", "updated", "unchanged",
"deleted" or the agent's error. Exits 1 if any failed (the others are
applied). With a thousand services or more it reports progress on stderr:
a bar on a terminal, one line per batch otherwise.`,
		examples: `  actorlb service apply --file services.json
  actorlb service apply -f services.json --prune --dry-run
  actorlb service apply -f services.json --prune
  echo '[{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]}]' | actorlb service apply -f -`,
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("file", "f", "", "JSON array of service specs to apply (- for standard input)")
			fs.Bool("prune", false, "also delete the services the file does not name")
			fs.Bool("dry-run", false, "change nothing: print what would be created, updated, unchanged and deleted")
			fs.Int("chunk-bytes", api.DefaultChunkBytes, "largest request body to send, in bytes (the agent refuses bodies over its limit, 1 MiB by default)")
		},
		run: runServiceApply,
	}
}

func runServiceApply(ctx context.Context, e *env, args []string) error {
	if err := wantArgs("service apply", args, 0, "no arguments (the services come from --file)"); err != nil {
		return err
	}
	file, _ := e.fs.GetString("file")
	prune, _ := e.fs.GetBool("prune")
	dryRun, _ := e.fs.GetBool("dry-run")
	chunk, _ := e.fs.GetInt("chunk-bytes")
	if file == "" {
		return &usageError{errors.New("service apply: --file is required (run 'actorlb service apply --help')")}
	}
	out, err := e.output()
	if err != nil {
		return err
	}
	var data []byte
	if file == "-" {
		data, err = io.ReadAll(e.stdin)
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
	cur, err := c.ListServices(ctx)
	if err != nil {
		return err
	}
	p := plan(specs, cur, prune)
	if dryRun {
		for _, id := range p.prune {
			p.rows = append(p.rows, applyRow{ID: int64(id), Result: actDeleted})
		}
		if err := printApply(e, out, p.rows); err != nil {
			return err
		}
		if !isData(out) {
			n := counts(p.rows)
			fmt.Fprintf(e.stdout, "Dry run: %d to create, %d to update, %d unchanged, %d to delete; nothing was changed\n",
				n[actCreated], n[actUpdated], n[actUnchanged], n[actDeleted])
		}
		return nil
	}

	bar := newProgress(e.stderr, "service apply", len(p.send)+len(p.prune))
	results, err := c.PutServicesChunked(ctx, p.send, chunk, bar.update)
	for j, r := range results {
		row := &p.rows[p.sendAt[j]]
		row.Code = r.Code
		switch {
		case r.Code == http.StatusCreated:
			row.Result = actCreated
		case r.Code < 300:
			row.Result = actUpdated
		default:
			row.Result, row.Error = "failed", r.Error
		}
	}
	if err != nil {
		bar.done()
		return fmt.Errorf("service apply: %w (%d of %d services sent before it)", err, len(results), len(p.send))
	}
	if len(p.prune) > 0 {
		sent := len(p.send)
		rs, err := c.DeleteServices(ctx, p.prune, chunk, func(done int) { bar.update(sent + done) })
		for _, r := range rs {
			row := applyRow{ID: r.ID, Result: actDeleted, Code: r.Code}
			switch {
			case r.Code == http.StatusNotFound:
				// Deleted meanwhile by someone else: what --prune wanted.
			case r.Code >= 300:
				row.Result, row.Error = "failed", r.Error
			}
			p.rows = append(p.rows, row)
		}
		if err != nil {
			bar.done()
			return fmt.Errorf("service apply: prune: %w", err)
		}
	}
	bar.done()
	if err := printApply(e, out, p.rows); err != nil {
		return err
	}
	if n := counts(p.rows)["failed"]; n > 0 {
		return fmt.Errorf("service apply: %d of %d services failed", n, len(p.rows))
	}
	return nil
}

func printApply(e *env, out string, rows []applyRow) error {
	if isData(out) {
		return e.write(out, rows)
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "ID\tRESULT")
	for _, r := range rows {
		res := r.Result
		if r.Error != "" {
			res = r.Error
		}
		fmt.Fprintf(tw, "%d\t%s\n", r.ID, res)
	}
	return tw.Flush()
}

func serviceDeleteCommand() *command {
	return &command{
		use:   "service delete (ID | --all) [flags]",
		short: "delete one service or all of them",
		long: `Deletes the service with ID, or with --all every service (in batch calls of up to 1,000, the agent's limit):
its master and slots, the backends no other service uses and its revNAT
entry. Exits 1 if there is no service with ID. Services of the Kubernetes
sync are not deleted here (delete the Kubernetes Service): deleting one by
ID fails, and --all leaves them.`,
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
			var id lb.ServiceID
			if !all {
				if id, err = lb.ParseServiceID(args[0]); err != nil {
					return &usageError{fmt.Errorf("service delete: %w", err)}
				}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			defer c.Close()
			deleted := []lb.ServiceID{}
			if !all {
				if err := c.DeleteService(ctx, id); err != nil {
					if errors.Is(err, api.ErrNotFound) {
						return fmt.Errorf("service %d not found (list them with 'actorlb service list')", id)
					}
					return err
				}
				deleted = append(deleted, id)
			} else {
				svcs, err := c.ListServices(ctx)
				if err != nil {
					return err
				}
				ids := make([]lb.ServiceID, 0, len(svcs))
				for _, s := range svcs {
					if ownedByAPI(s) {
						ids = append(ids, lb.ServiceID(s.Spec.ID))
					}
				}
				bar := newProgress(e.stderr, "service delete", len(ids))
				rs, err := c.DeleteServices(ctx, ids, 0, bar.update)
				bar.done()
				if err != nil {
					return err
				}
				var failed []string
				for _, r := range rs {
					switch {
					case r.Code < 300:
						deleted = append(deleted, lb.ServiceID(r.ID))
					case r.Code == http.StatusNotFound:
						// Deleted meanwhile by someone else: nothing to do.
					default:
						failed = append(failed, fmt.Sprintf("service %d: %s", r.ID, r.Error))
					}
				}
				if len(failed) > 0 {
					return fmt.Errorf("service delete: %d failed: %v", len(failed), failed)
				}
			}
			if isData(out) {
				return e.write(out, struct {
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
