// Command actorlb is the actorlb binary: `actorlb agent` runs the engine
// on the pinned maps until SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
)

const usage = `actorlb: control plane of an eBPF service load balancer.

Usage:
  actorlb agent [flags]     restore the LB maps pinned on bpffs and run the engine

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
	root := fs.String("bpf-root", maps.DefaultRoot, "bpffs directory the LB maps are pinned in (mounted at /sys/fs/bpf if missing)")
	maxEntries := fs.Int("map-max", maps.DefaultMaxEntries, "max entries of each service, backend and revNAT map")
	restore := fs.Bool("restore", true, "rebuild state from the pinned maps at start (false: empty them)")
	recreate := fs.Bool("recreate-maps", false, "replace pinned maps whose shape differs from the configured one (their entries are lost)")
	dryRun := fs.Bool("dry-run", false, "use in-memory maps: no kernel, no privileges, nothing pinned")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, `Usage: actorlb agent [flags]

Opens (or creates) the service, backend and revNAT maps under --bpf-root,
restores the services they hold (same IDs, no map writes when consistent),
and runs until SIGINT/SIGTERM. The maps stay pinned when it stops.

Examples:
  actorlb agent                          # as root, maps in /sys/fs/bpf/actorlb
  actorlb agent --dry-run                # no privileges, in-memory maps

Flags:
%s`, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	log := logrus.New()
	lvl, err := logrus.ParseLevel(*logLevel)
	if err != nil {
		return fmt.Errorf("invalid --log-level %q: want trace, debug, info, warn or error", *logLevel)
	}
	log.SetLevel(lvl)
	switch *logFormat {
	case "text":
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return fmt.Errorf("invalid --log-format %q: want text or json", *logFormat)
	}
	if *maxEntries < 1 || *maxEntries > 1<<24 {
		return fmt.Errorf("invalid --map-max %d: must be between 1 and %d", *maxEntries, 1<<24)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	sizes := maps.Sizes{Services: *maxEntries, Backends: *maxEntries, RevNAT: *maxEntries}
	e, err := actorlb.New(ctx, actorlb.Config{
		BPFRoot: *root, MaxEntries: sizes, RecreateMaps: *recreate, NoRestore: !*restore, InMemory: *dryRun, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer e.Close()
	st, err := e.Stats(ctx)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	where := e.Maps().Root
	if *dryRun {
		where = "memory (dry run)"
	}
	fmt.Printf("actorlb agent ready: maps in %s; restored %d services, %d backends, %d repairs (REST API and CLI: not built yet); stop with Ctrl-C\n",
		where, st.Restore.Services, st.Restore.Backends, st.Restore.Repairs)
	<-ctx.Done()
	log.Info("shutting down; maps stay pinned")
	return e.Close()
}
