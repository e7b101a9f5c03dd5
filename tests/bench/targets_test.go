package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func row(scenario, metric string, v float64) Row {
	return Row{Scenario: scenario, Metric: metric, Value: v, Unit: "x"}
}

func TestTargetsAreReadFromTheRunsRowsAndJudgedOnTheirSide(t *testing.T) {
	ts := []target{
		{"ratio at most 2", "a", "ratio", 2, true},
		{"rate at least 1.5", "b", "rate", 1.5, false},
		{"not run", "c", "absent", 1, true},
	}
	for _, tc := range []struct {
		name        string
		ratio, rate float64
		metA, metB  bool
	}{
		{"both met", 1.9, 1.6, true, true},
		{"on the bounds", 2, 1.5, true, true},
		{"both missed", 2.01, 1.49, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := []Row{row("a", "ratio", tc.ratio), row("b", "rate", tc.rate), row("b", "other", 9)}
			got, missing, err := targetRows(18, ts, rows)
			require.NoError(t, err)
			require.Equal(t, []string{"c.absent"}, missing)
			require.Len(t, got, 2)
			require.Equal(t, Row{Scenario: "issue-18-targets", Metric: "a.ratio", Value: tc.ratio, Unit: "x", Name: "ratio at most 2", Target: "<= 2", Met: &tc.metA}, got[0])
			require.Equal(t, Row{Scenario: "issue-18-targets", Metric: "b.rate", Value: tc.rate, Unit: "x", Name: "rate at least 1.5", Target: ">= 1.5", Met: &tc.metB}, got[1])
		})
	}
}

func TestTargetsRefuseARowWrittenTwice(t *testing.T) {
	_, _, err := targetRows(18, issue18, []Row{row("bulk-10k-x10", "ratio_to_put_floor", 1), row("bulk-10k-x10", "ratio_to_put_floor", 2)})
	require.ErrorContains(t, err, "bulk-10k-x10 ratio_to_put_floor written twice")
}

func TestTargetRowsKeepTheirVerdictInJSONAndOtherRowsDoNot(t *testing.T) {
	ts, _, err := targetRows(18, issue18, []Row{row("memory-10k-x10", "retained_bytes_per_service_ipv6", 847)})
	require.NoError(t, err)
	b, err := json.Marshal(append([]Row{row("floor", "put_services_per_s", 1)}, ts...))
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"scenario":"floor","metric":"put_services_per_s","value":1,"unit":"x"},
		{"scenario":"issue-18-targets","metric":"memory-10k-x10.retained_bytes_per_service_ipv6","value":847,"unit":"x",
		 "name":"bytes per 10-backend IPv6 service","target":"<= 1000","met":true}]`, string(b))
}

func TestTargetsTablePrintsEachVerdict(t *testing.T) {
	ts, _, err := targetRows(18, []target{{"one", "a", "m", 2, true}, {"two", "b", "m", 2, true}}, []Row{row("a", "m", 1), row("b", "m", 3)})
	require.NoError(t, err)
	var b bytes.Buffer
	printTargets(&b, 18, ts)
	require.Contains(t, b.String(), "issue 18 target")
	require.Regexp(t, `one +1 +x +<= 2 +met`, b.String())
	require.Regexp(t, `two +3 +x +<= 2 +missed`, b.String())
}
