package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
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

// command is one leaf of the command tree, turned into a cobra command by
// leafCommand.
type command struct {
	// use is the synopsis after "actorlb", like "service get ID".
	use   string
	short string
	long  string
	// examples, one per line, each "actorlb ...  # comment".
	examples string
	// flags adds the command's own flags (the global ones, -H and -o, are
	// the root's persistent flags).
	flags func(fs *pflag.FlagSet)
	// run runs the command with the positional arguments.
	run func(ctx context.Context, env *env, args []string) error
}

// env is what a command runs with.
type env struct {
	stdout, stderr io.Writer
	// fs holds the command's flags and the global ones.
	fs *pflag.FlagSet
	// stdin is standard input (for --file - and confirmations).
	stdin io.Reader
}

// quickStart ends the root's help.
const quickStart = `
Quick start (as root):
  actorlb agent                                  # in one shell: restore the maps, serve the API
  actorlb service update --id 1 --frontend 10.96.0.10:80 --backends 10.0.1.5:8080
  actorlb bpf lb list                            # what the datapath sees
`

// newRoot returns the command tree, writing to stdout and stderr.
func newRoot(stdout, stderr io.Writer, stdin io.Reader) *cobra.Command {
	root := group("actorlb", "control plane of an eBPF service load balancer",
		leafCommand("agent", agentCommand()),
		group("service", "manage services through the agent's API",
			leafCommand("list", serviceListCommand()),
			leafCommand("get", serviceGetCommand()),
			leafCommand("create", serviceCreateCommand()),
			leafCommand("update", serviceUpdateCommand()),
			leafCommand("apply", serviceApplyCommand()),
			leafCommand("delete", serviceDeleteCommand()),
		),
		group("backend", "see and change backends across services",
			leafCommand("list", backendListCommand()),
			leafCommand("set-state", backendSetStateCommand()),
		),
		group("bpf", "read the pinned BPF maps directly (no agent needed; reconcile asks the agent)",
			group("lb", "the load-balancer maps",
				leafCommand("list", bpfListCommand()),
				group("revnat", "the reverse-NAT maps",
					leafCommand("list", bpfRevNATListCommand()),
				),
				leafCommand("verify", bpfVerifyCommand()),
				leafCommand("reconcile", bpfReconcileCommand()),
			),
		),
		leafCommand("status", statusCommand()),
		leafCommand("version", versionCommand()),
		genDocsCommand(),
	)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(stdin)
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.Version = buildVersion().String()
	root.SetVersionTemplate("actorlb {{.Version}}\n")
	root.SetHelpFunc(printHelp)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		name := c.CommandPath()
		short := strings.TrimPrefix(name, "actorlb ")
		if c == c.Root() {
			return &usageError{fmt.Errorf("%w (run 'actorlb --help')", err)}
		}
		return &usageError{fmt.Errorf("%s: %w (run '%s --help')", short, err, name)}
	})
	globalFlags(root.PersistentFlags())
	root.Flags().SortFlags = false
	root.PersistentFlags().SortFlags = false
	return root
}

// group returns an inner node of the tree: without a subcommand it prints
// its help, with an unknown one it fails as a usage error.
func group(name, short string, children ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:   name + " COMMAND",
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			path := c.CommandPath()
			msg := fmt.Sprintf("unknown command %q for %q", args[0], path)
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %q?)", s[0])
			}
			return &usageError{fmt.Errorf("%s (run '%s --help')", msg, path)}
		},
	}
	g.AddCommand(children...)
	return g
}

// leafCommand turns a command into a cobra command named name.
func leafCommand(name string, cmd *command) *cobra.Command {
	// Use is the synopsis without the parents' names.
	use := cmd.use
	if i := strings.Index(use, " "+name); i >= 0 && strings.HasPrefix(use[i+1:], name) {
		use = use[i+1:]
	}
	c := &cobra.Command{
		Use:     use,
		Short:   cmd.short,
		Long:    strings.TrimSpace(cmd.long),
		Example: strings.TrimRight(cmd.examples, "\n"),
		RunE: func(c *cobra.Command, args []string) error {
			// Client commands end on SIGINT as any program does; the agent
			// catches it itself to stop cleanly.
			ctx := c.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return cmd.run(ctx, &env{stdout: c.OutOrStdout(), stderr: c.ErrOrStderr(), stdin: c.InOrStdin(), fs: c.Flags()}, args)
		},
	}
	c.Flags().SortFlags = false
	if cmd.flags != nil {
		cmd.flags(c.Flags())
	}
	return c
}

// printHelp is the help of every command: synopsis, description, examples
// and flags (the command's own, then the global ones).
func printHelp(c *cobra.Command, _ []string) {
	w := c.OutOrStdout()
	name := c.CommandPath()
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "%s: %s.\n\nUsage:\n  %s COMMAND [flags]\n\nCommands:\n", name, c.Short, name)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				fmt.Fprintf(w, "  %-11s %s\n", s.Name(), s.Short)
			}
		}
		if c == c.Root() {
			fmt.Fprint(w, quickStart)
		}
	} else {
		fmt.Fprintf(w, "Usage: %s\n", c.UseLine())
		if d := c.Long; d != "" || c.Short != "" {
			if d == "" {
				d = c.Short
			}
			fmt.Fprintf(w, "\n%s\n", d)
		}
		if c.Example != "" {
			fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
		}
	}
	if f := c.LocalFlags(); f.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", f.FlagUsages())
	}
	if f := c.InheritedFlags(); f.HasAvailableFlags() {
		fmt.Fprintf(w, "\nGlobal Flags:\n%s", f.FlagUsages())
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nRun '%s COMMAND --help' for the flags and examples of a command.\n", name)
	}
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runWith(args, stdout, stderr, os.Stdin)
}

func runWith(args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	err := dispatch(args, stdout, stderr, stdin)
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

func dispatch(args []string, stdout, stderr io.Writer, stdin io.Reader) error {
	root := newRoot(stdout, stderr, stdin)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err != nil && isCobraUsage(err) {
		return &usageError{err}
	}
	return err
}

// isCobraUsage tells the usage errors cobra makes itself (an unknown
// command of cobra's own commands, like "completion nope").
func isCobraUsage(err error) bool {
	var ue *usageError
	if errors.As(err, &ue) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "invalid argument") ||
		strings.Contains(msg, "arg(s)") || strings.HasPrefix(msg, "unknown flag")
}

// wantArgs checks the number of positional arguments.
func wantArgs(name string, args []string, n int, what string) error {
	if len(args) != n {
		return &usageError{fmt.Errorf("%s: want %s, got %d arguments (run 'actorlb %s --help')", name, what, len(args), name)}
	}
	return nil
}
