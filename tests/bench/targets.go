package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// target is one of issue 18's targets: the row of the run it reads, the
// bound and which side of it meets the target.
type target struct {
	name             string // what the README's table calls it
	scenario, metric string
	bound            float64
	atMost           bool // met when the value is ≤ bound (else ≥)
}

// issue18 are the targets of issue 18 (performance, second round), each
// read from a row the engine scenarios write.
var issue18 = []target{
	{"batched bulk: CPU per service ÷ the batch floor's", "bulk-10k-x10", "cpu_ratio_to_batch_floor", 2, true},
	{"batched bulk ÷ put floor", "bulk-10k-x10", "ratio_to_put_floor", 1.5, false},
	{"single-call bulk ÷ put floor", "bulk-10k-x10", "ratio_to_put_floor_single_calls", 1.0, false},
	{"insert 50k×1 batched ÷ its batch floor", "insert-50k-x1", "ratio_to_batch_floor", 0.6, false},
	{"upsert p99 during the single-call bulk, µs", "upsert-latency", "p99_us_library", 1000, true},
	{"upsert p99 beside UpsertBatch bulk, µs", "upsert-latency", "p99_us_library_during_batches", 2000, true},
	{"restore ready ÷ raw batched dump (warm)", "restore-10k-x10", "ratio_to_batch_dump", 1.5, true},
	{"restore ready ÷ raw batched dump (new process)", "restore-10k-x10", "ratio_to_batch_dump_new_process", 1.5, true},
	{"bytes per 10-backend IPv6 service", "memory-10k-x10", "retained_bytes_per_service_ipv6", 1000, true},
}

// targetScenario is the scenario of the target rows of issue n in
// bench-results.json: each names the row it reads as
// <scenario>.<metric>, carries its value and unit, the bound (Row.Target:
// "<= 2", ">= 1.5") and whether the value meets it (Row.Met).
func targetScenario(n int) string { return fmt.Sprintf("issue-%d-targets", n) }

// targetRows reads ts from rows, the rows of one run, and returns their
// target rows and the targets whose row the run did not write (its
// scenarios left out, or a row renamed). A row written twice is an
// error, as the figure would be ambiguous.
func targetRows(issue int, ts []target, rows []Row) (out []Row, missing []string, err error) {
	found, err := indexRows(rows)
	if err != nil {
		return nil, nil, err
	}
	out, missing = targetsOf(issue, ts, found)
	return out, missing, nil
}

// rowKey names a row of a run: its scenario and metric.
type rowKey struct{ scenario, metric string }

// indexRows returns rows by their key. A row written twice is an error,
// as the figure would be ambiguous.
func indexRows(rows []Row) (map[rowKey]Row, error) {
	found := make(map[rowKey]Row, len(rows))
	for _, r := range rows {
		k := rowKey{r.Scenario, r.Metric}
		if _, dup := found[k]; dup {
			return nil, fmt.Errorf("targets: row %s %s written twice", r.Scenario, r.Metric)
		}
		found[k] = r
	}
	return found, nil
}

// targetsOf is targetRows on rows already indexed.
func targetsOf(issue int, ts []target, found map[rowKey]Row) (out []Row, missing []string) {
	for _, t := range ts {
		r, ok := found[rowKey{t.scenario, t.metric}]
		if !ok {
			missing = append(missing, t.scenario+"."+t.metric)
			continue
		}
		tr := Row{Scenario: targetScenario(issue), Metric: t.scenario + "." + t.metric, Value: r.Value, Unit: r.Unit, Name: t.name}
		met := r.Value >= t.bound
		tr.Target = fmt.Sprintf(">= %g", t.bound)
		if t.atMost {
			met = r.Value <= t.bound
			tr.Target = fmt.Sprintf("<= %g", t.bound)
		}
		tr.Met = &met
		out = append(out, tr)
	}
	return out, missing
}

// printTargets writes the target rows ts of issue n as a table.
func printTargets(w io.Writer, n int, ts []Row) {
	if len(ts) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nissue %d target\tvalue\tunit\ttarget\t\n", n)
	for _, t := range ts {
		verdict := "missed"
		if t.Met != nil && *t.Met {
			verdict = "met"
		}
		fmt.Fprintf(tw, "%s\t%.4g\t%s\t%s\t%s\n", t.Name, t.Value, t.Unit, t.Target, verdict)
	}
	tw.Flush()
}
