package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
)

func bpfReconcileCommand() *command {
	return &command{
		use:   "bpf lb reconcile [flags]",
		short: "compare the maps with what the agent wrote, and repair them now",
		long: `Asks the agent (see -H) to check every map now, as it does every
--reconcile-interval: each pin must name the map the agent writes (a pin
removed or replaced is pinned again), and each map must hold exactly what the
agent wrote (entries missing or changed are written again, then entries the
agent never wrote are deleted). Prints what was repaired per map. Exits 1 if
a map could not be checked or repaired.`,
		examples: `  actorlb bpf lb reconcile
  actorlb bpf lb reconcile -o json`,
		flags: func(*pflag.FlagSet) {},
		run: func(ctx context.Context, e *env, args []string) error {
			if err := wantArgs("bpf lb reconcile", args, 0, "no arguments"); err != nil {
				return err
			}
			out, c, err := e.outputAndClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ds, err := c.Reconcile(ctx)
			if len(ds) == 0 {
				return err
			}
			if isData(out) {
				if werr := e.write(out, ds); werr != nil {
					return werr
				}
				return err
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "MAP\tPIN\tMISSING\tCHANGED\tEXTRA\tERROR")
			total := 0
			for _, d := range ds {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", d.Map, d.Pin, d.Missing, d.Changed, d.Extra, d.Error)
				total += d.Missing + d.Changed + d.Extra
				if d.Pin == "missing" || d.Pin == "replaced" {
					total++
				}
			}
			tw.Flush()
			fmt.Fprintf(e.stdout, "%s repaired\n", plural(total, "drift", "drifts"))
			return err
		},
	}
}
