package main

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/api"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// TestUpdateOptionsChangeOnlyWhatIsGiven: policies, affinity, algorithm
// and weights by address change their own fields and keep the rest.
func TestUpdateOptionsChangeOnlyWhatIsGiven(t *testing.T) {
	w := uint16(50)
	cur := &api.ServiceSpec{ID: 1, FrontendAddress: &api.FrontendAddress{IP: "10.0.0.1", Port: 80, Protocol: "tcp", Scope: "external"},
		BackendAddresses: []api.BackendAddress{{IP: "10.0.1.1", Port: 80, Weight: &w, State: "active"}, {IP: "10.0.1.2", Port: 80, State: "active"}},
		Flags: &api.ServiceFlags{Type: "LoadBalancer", TrafficPolicy: "Cluster", ExtTrafficPolicy: "Cluster", IntTrafficPolicy: "Cluster",
			SessionAffinity: true, SessionAffinityTimeout: 600, LBAlgorithm: "random"}}
	merged := func(args ...string) *api.ServiceSpec {
		t.Helper()
		u, err := parsedUpdate(t, append([]string{"--id", "1"}, args...)...)
		require.NoError(t, err)
		spec, err := u.merge(cur, nil)
		require.NoError(t, err)
		_, err = api.ToService(1, spec)
		require.NoError(t, err, "the agent accepts what the CLI builds")
		return spec
	}
	f := merged("--ext-traffic-policy", "local").Flags
	require.Equal(t, "Local", f.ExtTrafficPolicy)
	require.Empty(t, f.TrafficPolicy, "upstream's name of the field is left out: it would disagree")
	require.Equal(t, "Cluster", f.IntTrafficPolicy)
	require.Equal(t, uint32(600), f.SessionAffinityTimeout, "affinity kept")
	f = merged("--int-traffic-policy", "Local").Flags
	require.Equal(t, [2]string{"Cluster", "Local"}, [2]string{f.ExtTrafficPolicy, f.IntTrafficPolicy})
	f = merged("--affinity-timeout", "0").Flags
	require.False(t, f.SessionAffinity)
	require.Zero(t, f.SessionAffinityTimeout)
	f = merged("--affinity-timeout", "16777215").Flags
	require.True(t, f.SessionAffinity)
	require.Equal(t, uint32(16777215), f.SessionAffinityTimeout)
	require.Equal(t, "maglev", merged("--lb-algorithm", "Maglev").Flags.LBAlgorithm)
	bs := merged("--weights", "10.0.1.2:80=300").BackendAddresses
	require.EqualValues(t, 50, *bs[0].Weight, "a backend not named keeps its weight")
	require.EqualValues(t, 300, *bs[1].Weight)
	require.Equal(t, "LoadBalancer", merged("--weights", "10.0.1.1:80=0").Flags.Type)

	bs = merged("--node-local", "10.0.1.2:80").BackendAddresses
	require.Equal(t, []bool{false, true}, []bool{bs[0].NodeLocal, bs[1].NodeLocal})
	cur.BackendAddresses[0].NodeLocal = true
	bs = merged("--backends", "10.0.1.1:80,10.0.1.3:80").BackendAddresses
	require.True(t, bs[0].NodeLocal, "a backend kept keeps node-local")
	require.False(t, merged("--node-local", "").BackendAddresses[0].NodeLocal, "--node-local '' clears")
	u, err := parsedUpdate(t, "--id", "1", "--node-local", "10.0.1.9:80")
	require.NoError(t, err)
	_, err = u.merge(cur, nil)
	require.EqualError(t, err, "--node-local 10.0.1.9:80: service 1 has no backend 10.0.1.9:80")

	u, err = parsedUpdate(t, "--id", "1", "--weights", "10.0.1.9:80=5")
	require.NoError(t, err)
	_, err = u.merge(cur, nil)
	require.EqualError(t, err, "--weights 10.0.1.9:80=...: service 1 has no backend 10.0.1.9:80")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ext-traffic-policy", "Node"}, `--ext-traffic-policy: invalid policy "Node": must be Cluster or Local`},
		{[]string{"--int-traffic-policy", ""}, `--int-traffic-policy: invalid policy "": must be Cluster or Local`},
		{[]string{"--affinity-timeout", "16777216"}, `--affinity-timeout: invalid session-affinity-timeout "16777216": timeout must be 0 (off) or 1..16777215 seconds`},
		{[]string{"--affinity-timeout", "-1"}, `--affinity-timeout: invalid session-affinity-timeout "-1": timeout must be 0 (off) or 1..16777215 seconds`},
		{[]string{"--weights", "10.0.1.1:80=65536"}, `--weights: invalid weight "65536": weight must be between 0 and 65535`},
		{[]string{"--weights", "10.0.1.1:80=1,2"}, `--weights: "2": give every weight as W or every one as ADDR=W, not both`},
		{[]string{"--weights", "10.0.1.1:80=1,10.0.1.1:80=2"}, `--weights: 10.0.1.1:80 is given twice`},
		{[]string{"--weights", "10.0.1.1=1"}, `--weights 10.0.1.1=1: invalid backend "10.0.1.1": missing port`},
		{[]string{"--lb-algorithm", "rr"}, `--lb-algorithm: invalid lb-algorithm "rr": must be one of default, random, maglev`},
	} {
		_, err := parsedUpdate(t, append([]string{"--id", "1"}, tc.args...)...)
		require.EqualError(t, err, tc.want, "%v", tc.args)
	}
}

func TestNodePortFlagIsAPortAndAnOptionalProtocol(t *testing.T) {
	a, err := parseNodePort("30080", false)
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:30080/TCP", a.String())
	a, err = parseNodePort("30053/udp", true)
	require.NoError(t, err)
	require.Equal(t, "[::]:30053/UDP", a.String())
	require.True(t, a.Addr == netip.IPv6Unspecified())
	for in, want := range map[string]string{
		"0":                  `--node-port: invalid node-port "0": port must be between 1 and 65535`,
		"x":                  `--node-port: invalid node-port "x": port "x" is not a decimal number`,
		"30080/udp/internal": `--node-port: invalid node-port "30080/udp/internal": want PORT[/PROTOCOL]`,
	} {
		_, err := parseNodePort(in, false)
		require.EqualError(t, err, want, in)
	}
}

func TestCreateSharesUpdatesFlagsAndAddsNodePort(t *testing.T) {
	fs := pflag.NewFlagSet("create", pflag.ContinueOnError)
	serviceCreateCommand().flags(fs)
	require.NoError(t, fs.Parse([]string{"--id", "10", "--type", "NodePort", "--node-port", "30080", "--ext-traffic-policy", "Local", "--affinity-timeout", "30"}))
	u, err := parseUpdateFlags(fs)
	require.NoError(t, err)
	require.Equal(t, "Local", u.extPolicy)
	require.Equal(t, uint32(30), *u.affinity)
}
