package packetlb

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Outcomes names every counter of enum pkt_counter, in its order: the C
// enum and the Go names have one entry each.
func TestOutcomesNameEveryCounterOfTheProgram(t *testing.T) {
	src, err := os.ReadFile("packetlb.c")
	require.NoError(t, err)
	body := string(src)
	start := strings.Index(body, "enum pkt_counter {")
	require.NotEqual(t, -1, start)
	end := strings.Index(body[start:], "CNT_MAX")
	require.NotEqual(t, -1, end)
	names := regexp.MustCompile(`\bCNT_([A-Z_]+)`).FindAllStringSubmatch(body[start:start+end], -1)
	require.Len(t, Outcomes, len(names), "counters in packetlb.c: %v", names)
	require.LessOrEqual(t, len(Outcomes), 16, "packetlb_counters has 16 entries")
	// Spot checks of the order.
	require.Equal(t, "PASS_NOT_SERVICE", names[0][1])
	require.Equal(t, "pass_not_service", Outcomes[0])
	require.Equal(t, "ICMP_ERROR", names[len(names)-1][1])
	require.Equal(t, "icmp_error", Outcomes[len(Outcomes)-1])
	for i, n := range names {
		want := strings.ToLower(n[1])
		got := Outcomes[i]
		// Go names spell a few counters out in words.
		alias := map[string]string{"fwd_new": "forward_new", "fwd_ct": "forward_tracked", "pass_no_neigh": "pass_no_neighbour"}
		if a, ok := alias[want]; ok {
			want = a
		}
		require.Equal(t, want, got, "counter %d", i)
	}
}
