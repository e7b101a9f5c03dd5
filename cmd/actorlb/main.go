package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a command line that cannot be parsed (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// errSilent ends a command with exit status 1 after it has reported
// everything itself.
var errSilent = errors.New("silent failure")

// command is one leaf of the command tree.
type command struct {
	// use is the synopsis after "actorlb", like "service get ID".
	use   string
	short string
	long  string
	// examples, one per line, each "actorlb ...  # comment".
	examples string
	// flags adds the command's flags.
	flags func(fs *pflag.FlagSet)
	// run runs the command with the positional arguments.
	run func(ctx context.Context, env *env, args []string) error
}

// group is an inner node of the command tree.
type group struct {
	name     string
	short    string
	children []any // *group or *leaf
}

type leaf struct {
	name string
	cmd  *command
}

// env is what a command runs with.
type env struct {
	stdout, stderr io.Writer
	fs             *pflag.FlagSet
}

func tree() *group {
	return &group{name: "actorlb", short: "control plane of an eBPF service load balancer", children: []any{
		&leaf{"agent", agentCommand()},
		&group{name: "service", short: "manage services through the agent's API", children: []any{
			&leaf{"list", serviceListCommand()},
			&leaf{"get", serviceGetCommand()},
			&leaf{"update", serviceUpdateCommand()},
			&leaf{"apply", serviceApplyCommand()},
			&leaf{"delete", serviceDeleteCommand()},
		}},
		&group{name: "bpf", short: "read the pinned BPF maps directly (no agent needed)", children: []any{
			&group{name: "lb", short: "the load-balancer maps", children: []any{
				&leaf{"list", bpfListCommand()},
				&group{name: "revnat", short: "the reverse-NAT maps", children: []any{
					&leaf{"list", bpfRevNATListCommand()},
				}},
				&leaf{"verify", bpfVerifyCommand()},
			}},
		}},
		&leaf{"status", statusCommand()},
	}}
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errSilent):
		return 1
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "actorlb:", err)
		return 2
	}
	fmt.Fprintln(stderr, "actorlb:", err)
	return 1
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	node := tree()
	path := []string{"actorlb"}
	for {
		if len(args) == 0 || isHelp(args[0]) {
			printGroupHelp(stdout, node, path)
			return nil
		}
		var next any
		for _, c := range node.children {
			switch c := c.(type) {
			case *group:
				if c.name == args[0] {
					next = c
				}
			case *leaf:
				if c.name == args[0] {
					next = c
				}
			}
		}
		switch n := next.(type) {
		case *group:
			node, path, args = n, append(path, n.name), args[1:]
			continue
		case *leaf:
			return runLeaf(n.cmd, append(path, n.name), args[1:], stdout, stderr)
		}
		if strings.HasPrefix(args[0], "-") {
			return &usageError{fmt.Errorf("unknown flag %s for %q (run '%s --help')", args[0], strings.Join(path, " "), strings.Join(path, " "))}
		}
		return &usageError{fmt.Errorf("unknown command %q for %q (run '%s --help')", args[0], strings.Join(path, " "), strings.Join(path, " "))}
	}
}

func isHelp(s string) bool { return s == "-h" || s == "--help" || s == "help" }

func printGroupHelp(w io.Writer, g *group, path []string) {
	name := strings.Join(path, " ")
	fmt.Fprintf(w, "%s: %s.\n\nUsage:\n  %s COMMAND [flags]\n\nCommands:\n", name, g.short, name)
	for _, c := range g.children {
		switch c := c.(type) {
		case *group:
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.short)
		case *leaf:
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.cmd.short)
		}
	}
	if len(path) == 1 {
		fmt.Fprint(w, `
Quick start (as root):
  actorlb agent                                  # in one shell: restore the maps, serve the API
  actorlb service update --id 1 --frontend 10.96.0.10:80 --backends 10.0.1.5:8080
  actorlb bpf lb list                            # what the datapath sees
`)
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND --help' for the flags and examples of a command.\n", name)
}

func runLeaf(cmd *command, path []string, args []string, stdout, stderr io.Writer) error {
	name := strings.Join(path, " ")
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args); err != nil {
		short := strings.Join(path[1:], " ")
		return &usageError{fmt.Errorf("%s: %w (run '%s --help')", short, err, name)}
	}
	if *help {
		printLeafHelp(stdout, cmd, fs)
		return nil
	}
	// Client commands end on SIGINT as any program does; the agent catches
	// it itself to stop cleanly.
	return cmd.run(context.Background(), &env{stdout: stdout, stderr: stderr, fs: fs}, fs.Args())
}

func printLeafHelp(w io.Writer, cmd *command, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "Usage: actorlb %s\n\n%s\n", cmd.use, strings.TrimSpace(cmd.long))
	if cmd.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(cmd.examples, "\n"))
	}
	fmt.Fprintf(w, "\nFlags:\n%s", fs.FlagUsages())
}

// wantArgs checks the number of positional arguments.
func wantArgs(name string, args []string, n int, what string) error {
	if len(args) != n {
		return &usageError{fmt.Errorf("%s: want %s, got %d arguments (run 'actorlb %s --help')", name, what, len(args), name)}
	}
	return nil
}
