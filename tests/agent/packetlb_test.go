package agent_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

// netnsWithVeth makes a network namespace of the test's own with a veth
// pair (v0 198.18.0.2/24, v1) and forwarding on, removed when t ends, and
// returns its name.
func netnsWithVeth(t *testing.T) string {
	t.Helper()
	testutil.Privileged(t)
	name := fmt.Sprintf("albagent%d", testutil.Rand(t).IntN(1<<20))
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"},
		{"ip", "addr", "add", "198.18.0.2/24", "dev", "v0"},
		{"ip", "link", "set", "v0", "up"},
		{"ip", "link", "set", "v1", "up"},
		{"sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1"},
	} {
		out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + name}, argv...)...).CombinedOutput()
		require.NoError(t, err, "%v: %s", argv, out)
	}
	return name
}

// inNetnsBinary is a script that runs the actorlb binary in netns name.
func inNetnsBinary(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "actorlb-in-netns")
	script := fmt.Sprintf("#!/bin/sh\nexec nsenter --net=/run/netns/%s %s \"$@\"\n", name, binary)
	require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

// The agent attaches the packet datapath to --datapath-devices: status,
// `bpf lb list --datapath` and /metrics show the links; a restart updates
// them in place; a device that does not exist stops the agent with an
// error naming it.
func TestAgentAttachesThePacketDatapath(t *testing.T) {
	ns := netnsWithVeth(t)
	bin := inNetnsBinary(t, ns)
	root := testutil.PinDir(t)
	start := func() *agent {
		t.Helper()
		out, f := createOut(t, t.TempDir(), "stdout")
		a := launchBin(t, bin, f, root, filepath.Join(shortDir(t), "s.sock"), "--datapath-devices", "v0", "--datapath-mode", "generic")
		f.Close()
		a.stdout = out
		a.waitReady(t)
		return a
	}
	a := start()
	st := a.cli(t, "status")
	require.Zero(t, st.code, st.stderr)
	require.Contains(t, st.stdout, "Packet LB:")
	require.Contains(t, st.stdout, "v0/xdp(generic")
	require.Contains(t, st.stdout, "v0/tc(tcx ingress")

	list := a.bpf(t, "list", "--datapath")
	require.Zero(t, list.code, list.stderr)
	require.Regexp(t, `v0\s+xdp\s+generic`, list.stdout)
	require.Regexp(t, `v0\s+tc\s+tcx ingress`, list.stdout)
	require.Contains(t, list.stdout, "forward_new")

	metrics := string(a.doString(t, http.MethodGet, "/metrics", "").body)
	require.Contains(t, metrics, `actorlb_packetlb_links{device="v0",hook="xdp",mode="generic"} 1`)
	require.Contains(t, metrics, `actorlb_packetlb_packets_total{outcome="forward_new"}`)
	a.stop(t)

	// The links outlive the agent; the next one updates them.
	list = runCLI(t, "bpf", "lb", "list", "--datapath", "--bpf-root", root)
	require.Regexp(t, `v0\s+xdp`, list.stdout, "links pinned after the agent stopped")
	a = start()
	require.Contains(t, a.stdout.String()+a.stderr.String(), "packet lb:")
	a.stop(t)

	// A device that does not exist: the agent says which and exits.
	out, f := createOut(t, t.TempDir(), "stdout")
	b := launchBin(t, bin, f, root, filepath.Join(shortDir(t), "s2.sock"), "--datapath-devices", "v0,nosuch0")
	f.Close()
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit on a missing device")
	}
	require.Error(t, b.exitErr)
	require.Contains(t, b.stderr.String(), "nosuch0", "stdout: %s", out)
	require.True(t, strings.Contains(b.stderr.String(), "no such device"), b.stderr.String())
	b.stopped = true
}
