package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// genDocsCommand writes the markdown reference of every command (`make
// docs` runs it into docs/cli). It is hidden: it is for the repository,
// not for operators.
func genDocsCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "write the markdown reference of every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return genDocs(c.Root(), args[0])
		},
	}
}

// genDocs writes one markdown file per command of root into dir.
func genDocs(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gen-docs: %w", err)
	}
	root.DisableAutoGenTag = true
	root.InitDefaultCompletionCmd() // added at Execute otherwise
	// The defaults of -H and --bpf-root depend on the environment; the
	// reference shows the built-in ones.
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("gen-docs: %w", err)
	}
	return nil
}
