package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/actorlb/actorlb/api"
	"github.com/spf13/pflag"
)

func statusCommand() *command {
	return &command{
		use:   "status [flags]",
		short: "show the agent's health, counts, map fill and restore figures",
		long: `Asks the agent (see -H) for its health: whether it has restored and serves,
where it listens, how many services, backends and revNAT entries it holds,
how full each BPF map is, what the restore at start found and repaired, and
how often each actor restarted. With --verbose it also shows how long each
internal step of the operations took on average. Exits 1 if the agent is
not ready or cannot be reached.`,
		examples: `  actorlb status
  actorlb status --verbose
  actorlb status -o json | jq '.maps'`,
		flags: func(fs *pflag.FlagSet) {
			fs.Bool("verbose", false, "also show the mean time of each internal operation step")
		},
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("status", args, 0, "no arguments"); err != nil {
				return err
			}
			out, c, err := e.outputAndClient()
			if err != nil {
				return err
			}
			defer c.Close()
			st, err := c.Health(ctx)
			if st == nil {
				return err
			}
			if isData(out) {
				if werr := e.write(out, st); werr != nil {
					return werr
				}
			} else {
				printStatus(e, st)
			}
			if errors.Is(err, api.ErrUnavailable) {
				return fmt.Errorf("agent not ready: %s", st.Msg)
			}
			return err
		},
	}
}

func printStatus(e *env, st *api.Status) {
	w := e.stdout
	ready := "ready"
	if !st.Ready {
		ready = "not ready"
	}
	health := st.State
	if st.Msg != "" {
		health += ": " + st.Msg
	}
	fmt.Fprintf(w, "Agent:          %s (%s), up %s\n", health, ready, (time.Duration(st.UptimeSeconds) * time.Second).String())
	fmt.Fprintf(w, "Listening:      %s\n", strings.Join(st.Listen, ", "))
	mapsAt := st.BPFRoot
	if st.DryRun {
		mapsAt = "in memory (dry run)"
	}
	fmt.Fprintf(w, "Maps:           %s\n", mapsAt)
	if st.PacketLB != "" {
		fmt.Fprintf(w, "Packet LB:      %s\n", st.PacketLB)
	}
	if st.SocketLB != "" {
		fmt.Fprintf(w, "Datapath:       %s\n", st.SocketLB)
	}
	fmt.Fprintf(w, "Services:       %d   Backends: %d   RevNAT entries: %d   Operations in flight: %d\n",
		st.Services, st.Backends, st.RevNAT, st.OpsInFlight)
	if len(st.ServicesBySource) > 0 {
		var by []string
		for _, k := range slices.Sorted(maps.Keys(st.ServicesBySource)) {
			by = append(by, fmt.Sprintf("%s %d", k, st.ServicesBySource[k]))
		}
		fmt.Fprintf(w, "By source:      %s\n", strings.Join(by, ", "))
	}
	for _, src := range st.Sources {
		printSource(w, src)
	}
	r := st.Restore
	fmt.Fprintf(w, "Restored:       %s, %s, %s; %s (%s)\n",
		plural(r.Services, "service", "services"), plural(r.Backends, "backend", "backends"),
		plural(r.OrphanRevNAT, "orphan revNAT entry deleted", "orphan revNAT entries deleted"),
		plural(r.Repairs, "repair", "repairs"), plural(r.Writes, "map write", "map writes"))
	for _, k := range slices.Sorted(maps.Keys(r.RepairsByKind)) {
		fmt.Fprintf(w, "                  %s: %d\n", k, r.RepairsByKind[k])
	}
	var restarts []string
	for _, k := range slices.Sorted(maps.Keys(st.ActorRestarts)) {
		if n := st.ActorRestarts[k]; n > 0 {
			restarts = append(restarts, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(restarts) == 0 {
		restarts = []string{"none"}
	}
	fmt.Fprintf(w, "Actor restarts: %s\n\n", strings.Join(restarts, ", "))
	tw := newTable(w)
	fmt.Fprintln(tw, "MAP\tENTRIES\tMAX\tFILL\tWRITTEN\tDELETED")
	for _, m := range st.Maps {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f%%\t%d\t%d\n", m.Name, m.Entries, m.MaxEntries, 100*m.Fill, m.Updated, m.Deleted)
	}
	tw.Flush()
	if verbose, _ := e.fs.GetBool("verbose"); !verbose || len(st.Steps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "OPERATION STEP\tRUNS\tMEAN")
	for _, name := range slices.Sorted(maps.Keys(st.Steps)) {
		t := st.Steps[name]
		mean := time.Duration(0)
		if t.Count > 0 {
			mean = time.Duration(t.Seconds / float64(t.Count) * float64(time.Second)).Round(time.Microsecond)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", name, t.Count, mean)
	}
	tw.Flush()
}

// printSource prints what status says of a source (the Kubernetes one).
func printSource(w io.Writer, src api.SourceStatus) {
	conn := "connected"
	if !src.Connected {
		conn = "not connected"
	}
	if src.LastError != "" {
		conn += " (last error " + src.LastErrorTime + ": " + src.LastError + ")"
	}
	sync := "synced"
	if !src.Synced {
		sync = "not synced: the restored services keep serving until every informer has listed"
	}
	last := src.LastEvent
	if last == "" {
		last = "none yet"
	}
	fmt.Fprintf(w, "Source %s:%s%s, %s\n", src.Name, strings.Repeat(" ", max(1, 8-len(src.Name))), conn, sync)
	fmt.Fprintf(w, "                node %s, node addresses %s; last event %s\n", src.Node, cmp.Or(strings.Join(src.NodeAddresses, ","), "none"), last)
	fmt.Fprintf(w, "                %d services, %d frontends, %d pending, %d conflicts; last apply took %s\n",
		src.Services, src.Frontends, src.Pending, len(src.Conflicts),
		(time.Duration(src.LastSyncSeconds * float64(time.Second))).Round(time.Microsecond))
	if src.LastApplyError != "" {
		fmt.Fprintf(w, "                last apply error (retried): %s\n", src.LastApplyError)
	}
	for _, c := range src.Conflicts {
		fmt.Fprintf(w, "                conflict: %s of %s: %s\n", c.Frontend, c.Service, c.Reason)
	}
}
