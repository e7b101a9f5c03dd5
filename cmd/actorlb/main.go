// Command actorlb is the actorlb binary: `actorlb agent` runs the daemon.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/actorlb/actorlb/maps"
	"github.com/spf13/pflag"
)

const usage = `actorlb: control plane of an eBPF service load balancer.

Usage:
  actorlb agent [flags]     open (or create) the pinned LB maps and run the agent

Run 'actorlb agent --help' for the agent's flags.
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "actorlb:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Print(usage)
		return nil
	}
	switch args[0] {
	case "agent":
		return agent(args[1:])
	}
	return fmt.Errorf("unknown command %q (run 'actorlb --help')", args[0])
}

func agent(args []string) error {
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	root := fs.String("bpf-root", maps.DefaultRoot, "bpffs directory the LB maps are pinned in")
	maxEntries := fs.Int("map-max", maps.DefaultMaxEntries, "max entries of each service, backend and revNAT map")
	recreate := fs.Bool("recreate-maps", false, "replace pinned maps whose shape differs from the configured one (their entries are lost)")
	dryRun := fs.Bool("dry-run", false, "use in-memory maps: no kernel, no privileges, nothing pinned")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: actorlb agent [flags]\n\nOpens or creates the pinned LB maps and runs until SIGINT/SIGTERM (maps stay pinned).\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	sizes := maps.Sizes{Services: *maxEntries, Backends: *maxEntries, RevNAT: *maxEntries}
	lb, err := maps.Open(maps.Config{Root: *root, MaxEntries: sizes, Recreate: *recreate, InMemory: *dryRun})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer lb.Close()
	where := lb.Root
	if *dryRun {
		where = "memory (dry run)"
	}
	fmt.Printf("actorlb agent: maps ready in %s (created: %v); the service engine is not built yet, waiting for SIGINT/SIGTERM\n", where, lb.Created)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nil
}
