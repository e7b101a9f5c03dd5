package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMarkdownGivesEachFigureWithItsCPUAndEachTargetsVerdict(t *testing.T) {
	rows := []Row{
		{Scenario: "floor", Metric: "put_services_per_s", Value: 18243.6, Unit: "services/s"},
		{Scenario: "floor", Metric: "put_cpu_us_per_service", Value: 57.86, Unit: "us"},
		{Scenario: "bulk-10k-x10", Metric: "services_per_s", Value: 101507, Unit: "services/s"},
		{Scenario: "bulk-10k-x10", Metric: "cpu_us_per_service", Value: 15.93, Unit: "us"},
		{Scenario: "bulk-10k-x10", Metric: "cpu_ratio_to_batch_floor", Value: 2.41, Unit: "x"},
		{Scenario: "bulk-10k-x10", Metric: "ratio_to_put_floor", Value: 5.56, Unit: "x"},
		{Scenario: "upsert-latency", Metric: "p99_us_library", Value: 999.6, Unit: "us"},
		{Scenario: "restore-10k-x10", Metric: "ready_ms", Value: 68.24, Unit: "ms"},
		{Scenario: "restore-10k-x10", Metric: "cpu_ms", Value: 115.2, Unit: "ms"},
		{Scenario: "insert-50k-x1", Metric: "ratio_to_batch_floor", Value: 0.4668, Unit: "x"},
		// The run's own verdict rows are judged again from the rows they
		// name, not copied: this one says met where its row says missed.
		{Scenario: "issue-18-targets", Metric: "bulk-10k-x10.cpu_ratio_to_batch_floor", Value: 1.5, Unit: "x", Name: "batched bulk: CPU per service ÷ the batch floor's", Target: "<= 2", Met: new(bool)},
	}
	out := requireMarkdownLines(t, [][]Row{rows},
		"| put floor (one `bpf()` update per entry), services/s | 18,244 | 57.9 µs a service |",
		"| batched bulk (8 callers, `UpsertBatch` of 100), services/s | 101,507 | 15.9 µs a service |",
		"| upsert p99 during the single-call bulk, µs | 1,000 |  |",
		"| restore 10k×10, warm: ready, ms | 68.2 | 115 ms |",
		"| single-call bulk (8 callers, one `Upsert` each), services/s | — |  |", // not in the run
		"| batched bulk: CPU per service ÷ the batch floor's | 2.41 | ≤ 2 | missed |",
		"| batched bulk ÷ put floor | 5.56 | ≥ 1.5 | met |",
		"| insert 50k×1 batched ÷ its batch floor | 0.467 | ≥ 0.6 | missed |",
		"| upsert p99 during the single-call bulk, µs | 1,000 | ≤ 1,000 | met |", // 999.6: judged before it is rounded
		"| bytes per 10-backend IPv6 service | — | ≤ 1,000 | not measured |",
	)
	require.Equal(t, len(figures)+2+len(issue18)+2+1, strings.Count(out, "\n"), "every figure and every target once, each table with its header")
}

func TestNumbersKeepThreeDigitsAndSeparateThousands(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 0.4668: "0.467", 1: "1.00", 2.404: "2.40", 15.93: "15.9", 68.24: "68.2", 999.4: "999",
		999.6: "1,000", 1234.5: "1,235", 101507: "101,507", 1234567: "1,234,567", -2500: "-2,500",
	} {
		require.Equal(t, want, number(v), "%v", v)
	}
}

func TestMarkdownRefusesAFileThatIsNotARunsRows(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not-json.json": "scenario metric value",
		"object.json":   `{"scenario": "floor"}`,
		"empty.json":    `[]`,
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		_, err := readRows(path)
		require.Error(t, err, name)
		require.ErrorContains(t, err, "markdown: ")
		require.ErrorContains(t, err, path)
	}
	_, err := readRows(filepath.Join(dir, "absent.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "a run writes it: make bench")
}

func TestMarkdownOfSeveralRunsGivesTheFirstRunsFiguresAndTheirRanges(t *testing.T) {
	run := func(rate, ratio float64) []Row {
		return []Row{
			{Scenario: "bulk-10k-x10", Metric: "services_per_s", Value: rate, Unit: "services/s"},
			{Scenario: "bulk-10k-x10", Metric: "cpu_ratio_to_batch_floor", Value: ratio, Unit: "x"},
		}
	}
	third := append(run(90000, 1.9), Row{Scenario: "floor", Metric: "put_services_per_s", Value: 18000, Unit: "services/s"})
	requireMarkdownLines(t, [][]Row{run(77556, 3.19), run(101507, 2.11), third},
		"| figure | value | CPU per operation | range |",
		"| batched bulk (8 callers, `UpsertBatch` of 100), services/s | 77,556 |  | 77,556–101,507 (3 runs) |",
		// Not in the first run: no figure, and no range of the others.
		"| put floor (one `bpf()` update per entry), services/s | — |  | |",
		"| batched bulk: CPU per service ÷ the batch floor's | 3.19 | ≤ 2 | missed | 1.90–3.19 (3 runs) |",
		"| batched bulk ÷ put floor | — | ≥ 1.5 | not measured | |",
	)
	require.ErrorIs(t, writeMarkdown(io.Discard), errNoRows)
	twice := append(run(1, 2), run(3, 4)[0])
	require.ErrorContains(t, writeMarkdown(io.Discard, run(1, 2), twice), "markdown: targets: row bulk-10k-x10 services_per_s written twice")
}

// requireMarkdownLines writes the tables of runs and requires each of
// lines among theirs; it returns the tables.
func requireMarkdownLines(t *testing.T, runs [][]Row, lines ...string) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, writeMarkdown(&b, runs...))
	out := b.String()
	for _, line := range lines {
		require.Contains(t, out, line+"\n")
	}
	return out
}
