package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/spf13/pflag"
)

func bpfFlags(fs *pflag.FlagSet) {
	fs.String("bpf-root", maps.DefaultRoot, "bpffs directory the agent pins the maps in (default: $ACTORLB_BPF_ROOT, else the running agent's, else "+maps.DefaultRoot+")")
}

// agentRootTimeout bounds asking the agent where its maps are.
const agentRootTimeout = time.Second

// bpfRoot returns the pin directory: --bpf-root if given, else
// ACTORLB_BPF_ROOT, else the root of the agent at -H if one answers, else
// the default.
func (e *env) bpfRoot() string {
	if e.fs.Changed("bpf-root") {
		root, _ := e.fs.GetString("bpf-root")
		return root
	}
	if r := os.Getenv("ACTORLB_BPF_ROOT"); r != "" {
		return r
	}
	if c, err := e.client(); err == nil {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), agentRootTimeout)
		defer cancel()
		if st, err := c.Health(ctx); st != nil && st.BPFRoot != "" && (err == nil || errors.Is(err, api.ErrUnavailable)) {
			return st.BPFRoot
		}
	}
	return maps.DefaultRoot
}

func (e *env) dumpPinned() (string, table.Dump, error) {
	root := e.bpfRoot()
	d, err := verify.DumpPinned(root)
	return root, d, err
}

// entriesOf is d as the library's type (the same fields: the conversion
// stops compiling if they part).
func entriesOf(d table.Dump) actorlb.MapEntries { return actorlb.MapEntries(d) }

func bpfListCommand() *command {
	return &command{
		use:   "bpf lb list [flags]",
		short: "list the service map as the datapath sees it",
		long: `Reads the service, backend and revNAT maps pinned under --bpf-root directly
(read-only; no agent needed) and lists every frontend with its master entry
(slot 0: service ID, type, traffic policies, affinity timeout, count) and
its slots, each with the backend address it points to and, from lb_members,
its weight when not 100 and whether it is node-local. A service with two
backend sets (one traffic policy Local, "two-scopes") lists its internal set
under its frontend with /internal; maglev is shown as ignored by the socket
LB, which does not implement it yet. With -o json it prints the raw entries of all six maps,
decoded, with the field names of the datapath's C structs.

As Cilium's 'bpf lb list': --frontends lists the master entries only (one
line per service), --backends the backend maps, --revnat the reverse-NAT
maps (as 'bpf lb revnat list'). --datapath shows the packet datapath
(--datapath-devices of the agent): its links (device, hook, mode, program),
its per-outcome packet counters, and packets and bytes per service and per
backend. The maps are found under --bpf-root, else
$ACTORLB_BPF_ROOT, else where the running agent (at -H) pins them, else
` + maps.DefaultRoot + `.`,
		examples: `  actorlb bpf lb list
  actorlb bpf lb list --bpf-root /sys/fs/bpf/test
  actorlb bpf lb list --backends
  actorlb bpf lb list --frontends
  actorlb bpf lb list --revnat
  actorlb bpf lb list --datapath
  actorlb bpf lb list -o json | jq '.lb4_services'`,
		flags: func(fs *pflag.FlagSet) {
			bpfFlags(fs)
			fs.Bool("frontends", false, "list the frontends (master entries) only")
			fs.Bool("backends", false, "list the backend maps")
			fs.Bool("revnat", false, "list the reverse-NAT maps")
			fs.Bool("datapath", false, "show the packet datapath: links, outcome counters, traffic per service and backend")
		},
		run: func(_ context.Context, e *env, args []string) error {
			if err := wantArgs("bpf lb list", args, 0, "no arguments"); err != nil {
				return err
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			fes, _ := e.fs.GetBool("frontends")
			bes, _ := e.fs.GetBool("backends")
			rev, _ := e.fs.GetBool("revnat")
			dp, _ := e.fs.GetBool("datapath")
			if n := btoi(fes) + btoi(bes) + btoi(rev) + btoi(dp); n > 1 {
				return &usageError{errors.New("bpf lb list: give at most one of --frontends, --backends, --revnat and --datapath")}
			}
			if dp {
				return printPacketLB(e, out, e.bpfRoot())
			}
			root, d, err := e.dumpPinned()
			if err != nil {
				return err
			}
			switch {
			case rev:
				return printRevNAT(e, out, d)
			case bes:
				return printBackendMaps(e, out, d)
			case fes:
				return printFrontends(e, out, d)
			}
			if isData(out) {
				return e.write(out, api.NewMapsDump(root, entriesOf(d)))
			}
			return printServiceMaps(e.stdout, d)
		},
	}
}

// masterFlags describes a master entry's options as the agent would.
func masterFlags(fe lb.L3n4Addr, v maps.ServiceValue) string {
	spec := table.SpecFromMaster(fe, v)
	parts := []string{spec.Type.String()}
	if spec.ExtTrafficPolicyLocal {
		parts = append(parts, "ext-local")
	}
	if spec.IntTrafficPolicyLocal {
		parts = append(parts, "int-local")
	}
	if spec.SessionAffinity {
		parts = append(parts, fmt.Sprintf("affinity %ds", spec.SessionAffinityTimeout))
	}
	if spec.LBAlgorithm != lb.LBAlgDefault {
		parts = append(parts, algorithmString(spec.LBAlgorithm.String()))
	}
	if spec.DSR {
		parts = append(parts, "dsr")
	}
	if v.Flags2&lb.Flag2TwoScopes != 0 {
		parts = append(parts, "two-scopes")
	}
	if v.Flags&lb.FlagRoutable == 0 {
		parts = append(parts, "non-routable")
	}
	return strings.Join(parts, ", ")
}

// memberNote is what lb_members says of backend id in service rev: its
// weight when not the default, and whether it is node-local ("" if
// nothing).
func memberNote(members map[maps.MemberKey]maps.MemberValue, id uint32, rev uint16) string {
	m, ok := members[maps.MemberKey{BackendID: id, RevNATIndex: rev}]
	if !ok {
		return ""
	}
	var parts []string
	if m.Weight != lb.DefaultBackendWeight {
		parts = append(parts, fmt.Sprintf("weight %d", m.Weight))
	}
	if m.Flags&maps.MemberNodeLocal != 0 {
		parts = append(parts, "node-local")
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

func printServiceMaps(w io.Writer, d table.Dump) error {
	members := make(map[maps.MemberKey]maps.MemberValue, len(d.Members))
	for _, m := range d.Members {
		members[m.Key] = m.Value
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "SERVICE ADDRESS\tBACKEND ADDRESS (REVNAT_ID) (SLOT)")
	for _, fam := range []struct {
		svcs []maps.ServiceEntry
		bes  []maps.BackendEntry
	}{{d.Services4, d.Backends4}, {d.Services6, d.Backends6}} {
		bes := map[uint32]maps.BackendValue{}
		for _, b := range fam.bes {
			bes[b.ID] = b.Value
		}
		es := slices.Clone(fam.svcs)
		slices.SortFunc(es, func(a, b maps.ServiceEntry) int {
			ka, kb := a.Key, b.Key
			return cmp.Or(ka.Address.Compare(kb.Address), cmp.Compare(ka.Port, kb.Port), cmp.Compare(ka.Proto, kb.Proto),
				cmp.Compare(ka.Scope, kb.Scope), cmp.Compare(ka.Slot, kb.Slot))
		})
		var last maps.ServiceKey
		for i, e := range es {
			k := e.Key
			k.Slot = 0
			fe := table.FrontendFromKey(k)
			first := ""
			if i == 0 || k != last {
				first = fe.String()
			}
			last = k
			v := e.Value
			if e.Key.Slot == 0 {
				fmt.Fprintf(tw, "%s\t%s (%d) (0) [%s; count %d, qcount %d]\n", first, zeroAddr(fe.Addr), v.RevNATIndex,
					masterFlags(fe, v), v.Count, v.QCount)
				continue
			}
			be, ok := bes[v.BackendID]
			target := fmt.Sprintf("backend %d (missing)", v.BackendID)
			if ok {
				b := table.BackendFromValue(be)
				target = b.AddrPort().String() + "/" + b.Protocol.String()
				if b.State != lb.BackendStateActive {
					target += " " + b.State.String()
				}
			}
			fmt.Fprintf(tw, "%s\t%s (%d) (%d)%s\n", first, target, v.RevNATIndex, e.Key.Slot, memberNote(members, v.BackendID, v.RevNATIndex))
		}
	}
	return tw.Flush()
}

func zeroAddr(a netip.Addr) string {
	if a.Is6() {
		return "[::]:0"
	}
	return "0.0.0.0:0"
}

func bpfRevNATListCommand() *command {
	return &command{
		use:   "bpf lb revnat list [flags]",
		short: "list the reverse-NAT maps",
		long: `Reads lb4_reverse_nat and lb6_reverse_nat pinned under --bpf-root directly
(read-only; no agent needed) and lists every entry: the service ID, the
frontend address replies are rewritten to, and whether a service with that
ID exists in the service map (owner "service") or the entry stands alone.`,
		examples: `  actorlb bpf lb revnat list
  actorlb bpf lb revnat list -o json`,
		flags: bpfFlags,
		run: func(_ context.Context, e *env, args []string) error {
			if err := wantArgs("bpf lb revnat list", args, 0, "no arguments"); err != nil {
				return err
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			_, d, err := e.dumpPinned()
			if err != nil {
				return err
			}
			return printRevNAT(e, out, d)
		},
	}
}

// verifyTries and verifyPause: a violation must be seen in every one of
// verifyTries reads, verifyPause apart, to be reported, so that an agent
// writing while verify reads does not cause false alarms.
const (
	verifyTries = 3
	verifyPause = 200 * time.Millisecond
)

// violationJSON is a violation in verify's JSON output.
type violationJSON struct {
	Invariant int    `json:"invariant"`
	Kind      string `json:"kind"`
	Family    string `json:"family"`
	ServiceID uint16 `json:"service-id,omitempty"`
	Frontend  string `json:"frontend,omitempty"`
	BackendID uint32 `json:"backend-id,omitempty"`
	Detail    string `json:"detail"`
}

func bpfVerifyCommand() *command {
	return &command{
		use:   "bpf lb verify [flags]",
		short: "check the invariants of the pinned maps",
		long: `Reads the maps pinned under --bpf-root directly (read-only; no agent needed)
and checks the invariants the datapath relies on:
  1. every master with count n has slots 1..n (+qcount), and no other slots;
  2. every slot points to a backend in its family's backend map;
  3. every service has a revNAT entry with its ID and frontend address;
  4. no two frontends share a service ID (the internal backend set of a
     service with two is that service's), no backend address has two IDs,
     no backend ID is in both families, no backend is unreferenced
     (backends in maintenance, and those lb_members names, are exempt);
  6. lb_members and lb_affinity_match name only services and backends that
     exist, and an affinity match only a slotted backend of a service with
     session affinity;
  7. every maglev service (with a backend of weight above 0) has the Maglev
     table its counted backends and their weights give in lb4_maglev or
     lb6_maglev, and no other service ID has one;
  8. every master that carries the source-range flag has ranges in its
     family's lb4_source_range / lb6_source_range, and every range there
     belongs to such a master.
(Invariant 5, the maps equal what the agent acknowledged, needs the agent.)
It prints each violation and exits 1 if there is any. A violation must be
seen in 3 reads, 200ms apart, so that writes of a running agent do not give
false alarms. The agent repairs every violation at its next start.`,
		examples: `  actorlb bpf lb verify
  actorlb bpf lb verify --bpf-root /sys/fs/bpf/test -o json`,
		flags: bpfFlags,
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("bpf lb verify", args, 0, "no arguments"); err != nil {
				return err
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			var (
				d       table.Dump
				persist []verify.Violation
			)
			for try := 1; try <= verifyTries; try++ {
				if try > 1 {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(verifyPause):
					}
				}
				if _, d, err = e.dumpPinned(); err != nil {
					return err
				}
				vs := verify.Check(d)
				readers, closeReaders, err := verify.OpenPinnedMaglev(e.bpfRoot())
				if err != nil {
					return err
				}
				mvs, err := verify.CheckMaglev(d, readers)
				closeReaders()
				if err != nil {
					return err
				}
				vs = append(vs, mvs...)
				if try == 1 {
					persist = vs
				} else {
					persist = slices.DeleteFunc(persist, func(v verify.Violation) bool { return !slices.Contains(vs, v) })
				}
				if len(persist) == 0 {
					break
				}
			}
			// Services, not masters: a two-scope service has two.
			ids := map[uint16]bool{}
			for _, s := range append(slices.Clone(d.Services4), d.Services6...) {
				if s.Key.Slot == 0 {
					ids[s.Value.RevNATIndex] = true
				}
			}
			masters := len(ids)
			summary := fmt.Sprintf("%s, %s, %s",
				plural(masters, "service", "services"),
				plural(len(d.Backends4)+len(d.Backends6), "backend", "backends"),
				plural(len(d.RevNAT4)+len(d.RevNAT6), "revNAT entry", "revNAT entries"))
			if isData(out) {
				vj := []violationJSON{}
				for _, v := range persist {
					vj = append(vj, violationJSON{Invariant: v.Invariant(), Kind: string(v.Kind), Family: v.Family.String(),
						ServiceID: uint16(v.ServiceID), Frontend: v.Frontend, BackendID: uint32(v.BackendID), Detail: v.Detail})
				}
				if err := e.write(out, struct {
					OK         bool            `json:"ok"`
					Summary    string          `json:"summary"`
					Violations []violationJSON `json:"violations"`
				}{len(persist) == 0, summary, vj}); err != nil {
					return err
				}
			} else {
				for _, v := range persist {
					fmt.Fprintln(e.stdout, v.String())
				}
				if len(persist) == 0 {
					fmt.Fprintf(e.stdout, "OK: %s; invariants 1-4 and 6-8 hold\n", summary)
				}
			}
			if len(persist) > 0 {
				fmt.Fprintf(e.stderr, "actorlb: %s of the map invariants in %s (the agent repairs them at its next start)\n",
					plural(len(persist), "violation", "violations"), summary)
				return errSilent
			}
			return nil
		},
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func printRevNAT(e *env, out string, d table.Dump) error {
	entries := api.RevNATFromDump(entriesOf(d))
	if isData(out) {
		return e.write(out, entries)
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "ID\tFRONTEND ADDRESS\tOWNER")
	for _, r := range entries {
		owner := "standalone"
		if r.Service {
			owner = "service"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.ID, hostPort(r.IP, r.Port), owner)
	}
	return tw.Flush()
}

// backendJSON is one backend map entry of --backends.
type backendJSON struct {
	ID      uint32 `json:"id"`
	Address string `json:"address"`
	State   string `json:"state"`
}

func printBackendMaps(e *env, out string, d table.Dump) error {
	rows := []backendJSON{}
	for _, b := range append(slices.Clone(d.Backends4), d.Backends6...) {
		be := table.BackendFromValue(b.Value)
		rows = append(rows, backendJSON{ID: b.ID, Address: be.AddrPort().String() + "/" + be.Protocol.String(), State: be.State.String()})
	}
	slices.SortFunc(rows, func(a, b backendJSON) int { return cmp.Compare(a.ID, b.ID) })
	if isData(out) {
		return e.write(out, rows)
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "BACKEND ID\tADDRESS\tSTATE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.ID, r.Address, r.State)
	}
	return tw.Flush()
}

// frontendJSON is one master entry of --frontends.
type frontendJSON struct {
	Frontend  string `json:"frontend"`
	ServiceID uint16 `json:"service-id"`
	Options   string `json:"options"`
	Count     uint16 `json:"count"`
	QCount    uint16 `json:"qcount"`
}

func printFrontends(e *env, out string, d table.Dump) error {
	rows := []frontendJSON{}
	for _, s := range append(slices.Clone(d.Services4), d.Services6...) {
		if s.Key.Slot != 0 {
			continue
		}
		fe := table.FrontendFromKey(s.Key)
		rows = append(rows, frontendJSON{Frontend: fe.String(), ServiceID: uint16(s.Value.RevNATIndex), Options: masterFlags(fe, s.Value),
			Count: uint16(s.Value.Count), QCount: uint16(s.Value.QCount)})
	}
	slices.SortFunc(rows, func(a, b frontendJSON) int { return cmp.Compare(a.ServiceID, b.ServiceID) })
	if isData(out) {
		return e.write(out, rows)
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "SERVICE ID\tFRONTEND\tOPTIONS\tCOUNT\tQCOUNT")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\n", r.ServiceID, r.Frontend, r.Options, r.Count, r.QCount)
	}
	return tw.Flush()
}
