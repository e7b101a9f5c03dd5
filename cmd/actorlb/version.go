package main

import (
	"context"
	"fmt"

	"github.com/actorlb/actorlb/api"
)

// buildVersion is the binary's build information (also `--version`).
func buildVersion() api.BuildInfo { return api.Build() }

func versionCommand() *command {
	return &command{
		use:   "version [flags]",
		short: "show the version and VCS revision of this binary",
		long: `Prints the main module's version (a tag, or "(devel)" for a build from a
work tree), the VCS revision and commit time it was built from ("+dirty" when
the work tree had changes; unknown when built with -buildvcs=false) and the
Go toolchain, as the binary's embedded build information says. The same line
is 'actorlb --version'; the agent exports it as the actorlb_build_info metric.`,
		examples: `  actorlb version
  actorlb version -o json`,
		run: func(_ context.Context, e *env, args []string) error {
			if err := wantArgs("version", args, 0, "no arguments"); err != nil {
				return err
			}
			out, err := e.output()
			if err != nil {
				return err
			}
			b := buildVersion()
			if out != outTable {
				return e.write(out, b)
			}
			fmt.Fprintf(e.stdout, "actorlb %s\n", b)
			if b.Time != "" {
				fmt.Fprintf(e.stdout, "commit time: %s\n", b.Time)
			}
			return nil
		},
	}
}
