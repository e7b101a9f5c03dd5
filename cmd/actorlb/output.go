package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/actorlb/actorlb/api"
	"github.com/spf13/pflag"
)

// Output formats of -o.
const (
	outTable = "table"
	outJSON  = "json"
)

// outputFlag adds -o/--output.
func outputFlag(fs *pflag.FlagSet) {
	fs.StringP("output", "o", outTable, "output format: table (for people) or json (for scripts)")
}

// hostFlag adds -H/--host; ACTORLB_HOST overrides the default.
func hostFlag(fs *pflag.FlagSet) {
	def := api.DefaultHost
	if h := os.Getenv("ACTORLB_HOST"); h != "" {
		def = h
	}
	fs.StringP("host", "H", def, "agent API: unix:///PATH of its socket or http://127.0.0.1:PORT (env ACTORLB_HOST)")
	fs.String("token-file", os.Getenv("ACTORLB_API_TOKEN_FILE"), "file holding the agent's API token, which its TCP listener requires (env ACTORLB_API_TOKEN_FILE)")
}

// output returns the -o value, checked.
func (e *env) output() (string, error) {
	o, _ := e.fs.GetString("output")
	if o != outTable && o != outJSON {
		return "", &usageError{fmt.Errorf("invalid --output %q: want table or json", o)}
	}
	return o, nil
}

// client returns a client for -H.
func (e *env) client() (*api.Client, error) {
	h, _ := e.fs.GetString("host")
	var opts []api.ClientOption
	if f, _ := e.fs.GetString("token-file"); f != "" {
		token, err := api.ReadTokenFile(f)
		if err != nil {
			return nil, &usageError{fmt.Errorf("invalid --token-file: %w", err)}
		}
		opts = append(opts, api.WithToken(token))
	}
	c, err := api.NewClient(h, opts...)
	if err != nil {
		return nil, &usageError{err}
	}
	return c, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a tab writer for aligned columns; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
