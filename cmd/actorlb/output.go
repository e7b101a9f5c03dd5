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

// globalFlags adds the flags every command takes, before or after its
// name: -H/--host (ACTORLB_HOST overrides the default) and -o/--output.
func globalFlags(fs *pflag.FlagSet) {
	def := api.DefaultHost
	if h := os.Getenv("ACTORLB_HOST"); h != "" {
		def = h
	}
	fs.StringP("host", "H", def, "agent API: unix:///PATH of its socket or http://127.0.0.1:PORT (env ACTORLB_HOST)")
	fs.StringP("output", "o", outTable, "output format: table (for people) or json (for scripts)")
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
	c, err := api.NewClient(h)
	if err != nil {
		return nil, &usageError{err}
	}
	return c, nil
}

// write prints v in the data format out (json).
func (e *env) write(_ string, v any) error { return writeJSON(e.stdout, v) }

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

// isData says whether out is a data format (not a table).
func isData(out string) bool { return out == outJSON }

// flagError is err (from the API) as is, for now.
func flagError(err error) error { return err }
