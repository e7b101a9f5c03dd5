package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/actorlb/actorlb/api"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// Output formats of -o (case-insensitive).
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
)

// globalFlags adds the flags every command takes, before or after its
// name: -H/--host (ACTORLB_HOST overrides the default) and -o/--output.
func globalFlags(fs *pflag.FlagSet) {
	def := api.DefaultHost
	if h := os.Getenv("ACTORLB_HOST"); h != "" {
		def = h
	}
	fs.StringP("host", "H", def, "agent API: unix:///PATH of its socket or http://127.0.0.1:PORT (env ACTORLB_HOST)")
	fs.StringP("output", "o", outTable, "output format: table or wide (for people), json or yaml (for scripts); case-insensitive")
	fs.String("token-file", os.Getenv("ACTORLB_API_TOKEN_FILE"), "file holding the agent's API token, which its TCP listener requires (env ACTORLB_API_TOKEN_FILE)")
}

// output returns the -o value, checked.
func (e *env) output() (string, error) {
	o, _ := e.fs.GetString("output")
	switch l := strings.ToLower(o); l {
	case outTable, outWide, outJSON, outYAML:
		return l, nil
	}
	return "", &usageError{fmt.Errorf("invalid --output %q: want table, wide, json or yaml", o)}
}

// client returns a client for -H.
// outputAndClient is output then client: the start of every command that
// asks the agent and prints its answer. The caller closes the client.
func (e *env) outputAndClient() (string, *api.Client, error) {
	out, err := e.output()
	if err != nil {
		return "", nil, err
	}
	c, err := e.client()
	if err != nil {
		return "", nil, err
	}
	return out, c, nil
}

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

// write prints v in the data format out: json, or yaml (the same fields,
// converted from the JSON).
func (e *env) write(out string, v any) error {
	if out != outYAML {
		return writeJSON(e.stdout, v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	_, err = e.stdout.Write(b)
	return err
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

// isData says whether out is a data format (not a table).
func isData(out string) bool { return out == outJSON || out == outYAML }

// apiPaths maps the JSON paths of the API's errors to service update's
// flags.
var apiPaths = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`\bbackend-addresses\[(\d+)\]\.weight\b`), "--weights (value ${1})"},
	{regexp.MustCompile(`\bbackend-addresses\[(\d+)\]\.state\b`), "--states (value ${1})"},
	{regexp.MustCompile(`\bbackend-addresses\[(\d+)\](\.ip|\.port)?`), "--backends (backend ${1})"},
	{regexp.MustCompile(`\bfrontend-address(\.\w+)?`), "--frontend"},
	{regexp.MustCompile(`\bflags\.type\b`), "--type"},
	{regexp.MustCompile(`\bflags\.(extTrafficPolicy|trafficPolicy)\b`), "--ext-traffic-policy"},
	{regexp.MustCompile(`\bflags\.intTrafficPolicy\b`), "--int-traffic-policy"},
	{regexp.MustCompile(`\bflags\.sessionAffinityTimeout\b`), "--affinity-timeout"},
	{regexp.MustCompile(`\bflags\.lbAlgorithm\b`), "--lb-algorithm"},
	{regexp.MustCompile(`\bflags\.sourceRangesDeny\b`), "--source-ranges-deny"},
	{regexp.MustCompile(`\bflags\.sourceRanges\[(\d+)\]`), "--source-ranges (range ${1})"},
	{regexp.MustCompile(`\bflags\.sourceRanges\b`), "--source-ranges"},
	{regexp.MustCompile(`^invalid id\b`), "invalid --id"},
}

// flagError rewrites the JSON paths an API error names into the flags
// of service update they came from (backends counted from 1).
func flagError(err error) error {
	msg := err.Error()
	changed := msg
	for _, p := range apiPaths {
		changed = p.re.ReplaceAllStringFunc(changed, func(m string) string {
			sub := p.re.FindStringSubmatch(m)
			out := p.repl
			if len(sub) > 1 && strings.Contains(out, "${1}") {
				n, _ := strconv.Atoi(sub[1])
				out = strings.ReplaceAll(out, "${1}", strconv.Itoa(n+1))
			}
			return out
		})
	}
	if changed == msg {
		return err
	}
	return &mappedError{msg: changed, err: err}
}

// mappedError is an API error whose message names flags; it still
// matches the API's sentinels.
type mappedError struct {
	msg string
	err error
}

func (e *mappedError) Error() string { return e.msg }
func (e *mappedError) Unwrap() error { return e.err }
