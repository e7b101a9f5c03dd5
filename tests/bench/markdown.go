package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// figure is one line of the README's table of the engine's figures: a
// row of the run, with the row of its CPU per operation beside it (a
// metric of the same scenario; none for latencies and memory).
type figure struct {
	name             string
	scenario, metric string
	cpu              string
}

// figures are the lines of the README's table, in its order: the floors,
// then each engine scenario's rate or latency.
var figures = []figure{
	{"put floor (one `bpf()` update per entry), services/s", "floor", "put_services_per_s", "put_cpu_us_per_service"},
	{"batch floor (one `BatchUpdate` per map), services/s", "floor", "batch_services_per_s", "batch_cpu_us_per_service"},
	{"batched bulk (8 callers, `UpsertBatch` of 100), services/s", "bulk-10k-x10", "services_per_s", "cpu_us_per_service"},
	{"batched bulk, a cluster's addresses (`Spread`), services/s", "bulk-10k-x10-spread", "services_per_s", "cpu_us_per_service"},
	{"the 10k×10 set as one `UpsertBatch`, services/s", "bulk-10k-x10", "services_per_s_one_upsertbatch", "cpu_us_per_service_one_upsertbatch"},
	{"the 10k×10 set as one `SyncSource`, services/s", "bulk-10k-x10", "services_per_s_one_syncsource", "cpu_us_per_service_one_syncsource"},
	{"single-call bulk (8 callers, one `Upsert` each), services/s", "bulk-10k-x10", "services_per_s_single_calls", "cpu_us_per_service_single_calls"},
	{"upsert p50 during the single-call bulk, µs", "upsert-latency", "p50_us_library", ""},
	{"upsert p99 during the single-call bulk, µs", "upsert-latency", "p99_us_library", ""},
	{"upsert p99 beside the batched bulk, µs", "upsert-latency", "p99_us_library_during_batches", ""},
	{"upsert p99 beside one `SyncSource`, µs", "upsert-latency", "p99_us_library_during_sync", ""},
	{"endpoint change of every service (`UpsertBatch`), services/s", "update-10k-x10", "services_per_s", "cpu_us_per_service"},
	{"insert 50k×1 (`UpsertBatch` of 1,000), services/s", "insert-50k-x1", "services_per_s", "cpu_us_per_service"},
	{"delete 50k×1 (`DeleteBatch` of 1,000), services/s", "insert-50k-x1", "delete_services_per_s", ""},
	{"restore 10k×10, warm: ready, ms", "restore-10k-x10", "ready_ms", "cpu_ms"},
	{"restore 10k×10, new process: ready, ms", "restore-10k-x10", "ready_ms_new_process", "cpu_ms_new_process"},
	{"drift check of 10k×10, ms", "reconcile-10k-x10", "ms", "cpu_ms"},
	{"memory per 10-backend IPv4 service, bytes", "memory-10k-x10", "retained_bytes_per_service", ""},
	{"memory per 10-backend IPv6 service, bytes", "memory-10k-x10", "retained_bytes_per_service_ipv6", ""},
}

// errNoRows is returned by readRows for a file that holds no row.
var errNoRows = errors.New("no rows")

// readRows reads the rows of a run from a bench-results.json file.
func readRows(path string) ([]Row, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("markdown: %w (a run writes it: make bench, or go run ./tests/bench --out %s)", err, path)
	}
	if err != nil {
		return nil, fmt.Errorf("markdown: %w", err)
	}
	var rows []Row
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("markdown: %s is not a bench-results.json (a JSON array of rows): %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("markdown: %s: %w", path, errNoRows)
	}
	return rows, nil
}

// writeMarkdown writes the README's tables of runs, each the rows of one
// run: the engine's figures, each with its CPU per operation, then issue
// 18's targets judged on the same rows. The figures are the first run's;
// with more runs, a column gives each figure's range over all of them
// (the first included). A figure the first run did not measure (its
// scenarios left out) reads "—", and so does a target.
func writeMarkdown(w io.Writer, runs ...[]Row) error {
	if len(runs) == 0 {
		return fmt.Errorf("markdown: %w", errNoRows)
	}
	found := make([]map[rowKey]Row, len(runs))
	for i, rows := range runs {
		// A run's own verdict rows are left out: its targets are judged
		// again below, from the rows they name.
		figs := slices.DeleteFunc(slices.Clone(rows), func(r Row) bool { return r.Scenario == targetScenario(18) })
		var err error
		if found[i], err = indexRows(figs); err != nil {
			return fmt.Errorf("markdown: %w", err)
		}
	}
	// rangeCell is the range column's cell of a row: its range over the
	// runs that have it, blank when the first run lacks it, nothing with
	// one run.
	rangeCell := func(k rowKey) string {
		if len(runs) == 1 {
			return ""
		}
		if _, ok := found[0][k]; !ok {
			return " |"
		}
		lo, hi, n := math.Inf(1), math.Inf(-1), 0
		for _, f := range found {
			if r, ok := f[k]; ok {
				lo, hi, n = min(lo, r.Value), max(hi, r.Value), n+1
			}
		}
		return fmt.Sprintf(" %s–%s (%d runs) |", number(lo), number(hi), n)
	}
	extra, rule := "", ""
	if len(runs) > 1 {
		extra, rule = " range |", "---|"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| figure | value | CPU per operation |%s\n|---|---|---|%s\n", extra, rule)
	for _, f := range figures {
		k := rowKey{f.scenario, f.metric}
		v, cpu := "—", ""
		if r, ok := found[0][k]; ok {
			v = number(r.Value)
		}
		if c, ok := found[0][rowKey{f.scenario, f.cpu}]; ok && f.cpu != "" {
			cpu = number(c.Value) + " " + cpuUnit(c)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |%s\n", f.name, v, cpu, rangeCell(k))
	}
	ts, _ := targetsOf(18, issue18, found[0])
	byName := map[string]Row{}
	for _, t := range ts {
		byName[t.Name] = t
	}
	fmt.Fprintf(&b, "\n| issue 18 target | value | bound | |%s\n|---|---|---|---|%s\n", extra, rule)
	for _, t := range issue18 {
		value, verdict := "—", "not measured"
		if r, ok := byName[t.name]; ok {
			value, verdict = number(r.Value), "missed"
			if *r.Met {
				verdict = "met"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |%s\n", t.name, value, bound(t), verdict, rangeCell(rowKey{t.scenario, t.metric}))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// bound is a target's bound as the README writes it: ≤ 2, ≥ 1.5,
// ≤ 1,000.
func bound(t target) string {
	b := strconv.FormatFloat(t.bound, 'f', -1, 64)
	if t.bound >= 1000 {
		b = number(t.bound)
	}
	if t.atMost {
		return "≤ " + b
	}
	return "≥ " + b
}

// cpuUnit names the unit of a CPU row for the table: "µs" or "ms" of
// CPU, per service unless the row is a whole operation's.
func cpuUnit(r Row) string {
	u := strings.Replace(r.Unit, "us", "µs", 1)
	if strings.Contains(r.Metric, "per_service") {
		return u + " a service"
	}
	return u
}

// number writes v with three significant digits, and thousands
// separated by commas from 1,000 up (1,234; 56.7; 0.482).
func number(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case math.Abs(math.Round(v)) >= 1000:
		s := strconv.FormatInt(int64(math.Round(v)), 10)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []byte
		for i := range len(s) {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		if neg {
			return "-" + string(out)
		}
		return string(out)
	case v == 0:
		return "0"
	default:
		digits := 2 - int(math.Floor(math.Log10(math.Abs(v))))
		return strconv.FormatFloat(v, 'f', max(0, digits), 64)
	}
}
