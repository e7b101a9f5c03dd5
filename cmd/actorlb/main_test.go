package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/api"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func TestCheckAPIAddr(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.2:0", "[::1]:80", "localhost:9000"} {
		require.NoError(t, checkAPIAddr(addr, false), addr)
	}
	for _, addr := range []string{"0.0.0.0:80", ":80", "[::]:80", "10.0.0.1:80", "[fd00::1]:80"} {
		err := checkAPIAddr(addr, false)
		require.ErrorIs(t, err, errRemote, addr)
		require.NoError(t, checkAPIAddr(addr, true), addr)
	}
	for _, addr := range []string{"80", "127.0.0.1", "host.example:80", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:http", "127.0.0.1:080"} {
		err := checkAPIAddr(addr, true)
		require.Error(t, err, addr)
		require.Contains(t, err.Error(), "invalid --api-addr", addr)
	}
}

func parsedUpdate(t *testing.T, args ...string) (*updateFlags, error) {
	t.Helper()
	fs := pflag.NewFlagSet("update", pflag.ContinueOnError)
	serviceUpdateCommand().flags(fs)
	require.NoError(t, fs.Parse(args))
	return parseUpdateFlags(fs)
}

func TestUpdateFlagsBuildTheSpec(t *testing.T) {
	u, err := parsedUpdate(t, "--id", "7", "--frontend", "[fd00::a]:53/udp/internal",
		"--backends", "[fd00::1]:53,[fd00::2]:53/udp", "--weights", "0,65535", "--states", "active,Terminating", "--type", "nodeport")
	require.NoError(t, err)
	require.EqualValues(t, 7, u.id)
	spec, err := u.merge(nil, nil)
	require.NoError(t, err)
	w0, w1 := uint16(0), uint16(65535)
	require.Equal(t, &api.ServiceSpec{
		ID:              7,
		FrontendAddress: &api.FrontendAddress{IP: "fd00::a", Port: 53, Protocol: "udp", Scope: "internal"},
		BackendAddresses: []api.BackendAddress{
			{IP: "fd00::1", Port: 53, Weight: &w0, State: "active"},
			{IP: "fd00::2", Port: 53, Weight: &w1, State: "terminating"},
		},
		Flags: &api.ServiceFlags{Type: "nodeport"},
	}, spec)
	svc, err := api.ToService(7, spec)
	require.NoError(t, err, "the agent accepts what the CLI builds")
	require.Equal(t, "[fd00::a]:53/UDP/internal", svc.Frontend.L3n4Addr.String())

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--frontend", "10.0.0.1:80"}, "--id is required"},
		{[]string{"--id", "x", "--frontend", "10.0.0.1:80"}, `--id: invalid id "x": not a decimal number`},
		{[]string{"--id", "1", "--frontend", "10.0.0.1"}, `--frontend: invalid address "10.0.0.1": missing port`},
		{[]string{"--id", "1", "--frontend", "10.0.0.1:80", "--backends", "10.0.0.2"}, `--backends: invalid backend "10.0.0.2": missing port`},
		{[]string{"--id", "1", "--frontend", "10.0.0.1:80", "--backends", "10.0.0.2:1", "--weights", "70000"}, `--weights: invalid weight "70000": weight must be between 0 and 65535`},
		{[]string{"--id", "1", "--frontend", "10.0.0.1:80", "--backends", "10.0.0.2:1", "--weights", "heavy"}, `--weights: invalid weight "heavy": not a decimal number`},
		{[]string{"--id", "1", "--frontend", "10.0.0.1:80", "--backends", "10.0.0.2:1", "--states", "a,b"}, "--states has 2 values for 1 backends (give one per backend)"},
		{[]string{"--id", "1", "--frontend", "10.0.0.1:80", "--type", "Headless"}, `--type: invalid type "Headless": must be one of ClusterIP, NodePort, ExternalIPs, LoadBalancer, HostPort, LocalRedirect`},
	} {
		_, err := parsedUpdate(t, tc.args...)
		require.EqualError(t, err, tc.want, "%v", tc.args)
	}
}

// TestUpdateKeepsWhatIsNotGiven: merge changes only what the flags give.
func TestUpdateKeepsWhatIsNotGiven(t *testing.T) {
	w := uint16(50)
	cur := &api.ServiceSpec{ID: 1, FrontendAddress: &api.FrontendAddress{IP: "10.0.0.1", Port: 80, Protocol: "tcp", Scope: "external"},
		BackendAddresses: []api.BackendAddress{{IP: "10.0.1.1", Port: 80, Weight: &w, State: "terminating"}},
		Flags:            &api.ServiceFlags{Type: "NodePort"}}
	merged := func(args ...string) *api.ServiceSpec {
		t.Helper()
		u, err := parsedUpdate(t, append([]string{"--id", "1"}, args...)...)
		require.NoError(t, err)
		spec, err := u.merge(cur, map[string]string{"10.0.1.2:80": "quarantined"})
		require.NoError(t, err)
		return spec
	}
	require.Equal(t, cur, merged(), "no flag: nothing changes")
	require.Equal(t, cur, merged("--frontend", "10.0.0.1:80"), "the same frontend")
	require.Equal(t, "ClusterIP", merged("--type", "ClusterIP").Flags.Type)
	require.Equal(t, "NodePort", cur.Flags.Type, "cur is not changed")
	spec := merged("--backends", "10.0.1.1:80,10.0.1.2:80,10.0.1.3:80")
	require.Equal(t, []api.BackendAddress{{IP: "10.0.1.1", Port: 80, Weight: &w, State: "terminating"},
		{IP: "10.0.1.2", Port: 80, State: "quarantined"}, {IP: "10.0.1.3", Port: 80}}, spec.BackendAddresses)
	require.Empty(t, merged("--backends", "").BackendAddresses, "--backends '' clears")
	require.Equal(t, "active", merged("--states", "active").BackendAddresses[0].State)

	u, err := parsedUpdate(t, "--id", "1", "--frontend", "10.0.0.2:80")
	require.NoError(t, err)
	_, err = u.merge(cur, nil)
	require.ErrorContains(t, err, "service 1 has frontend 10.0.0.1:80/TCP, and a service's frontend never changes")
	u, err = parsedUpdate(t, "--id", "1", "--weights", "1,2")
	require.NoError(t, err)
	_, err = u.merge(cur, nil)
	require.ErrorContains(t, err, "--weights has 2 values for the 1 backends of service 1")
	u, err = parsedUpdate(t, "--id", "2")
	require.NoError(t, err)
	_, err = u.merge(nil, nil)
	require.EqualError(t, err, "--frontend is required to create service 2 (it does not exist)")
}

func TestPrepareSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "alb")
	require.NoError(t, err)
	defer os.RemoveAll(dir)

	path := filepath.Join(dir, "sub", "s.sock")
	require.NoError(t, prepareSocket(path), "a missing socket and directory are fine")
	require.DirExists(t, filepath.Dir(path))

	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	err = prepareSocket(path)
	require.ErrorIs(t, err, errInUse)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	require.FileExists(t, path)
	require.NoError(t, prepareSocket(path), "a stale socket is removed")
	require.NoFileExists(t, path)

	require.NoError(t, os.WriteFile(path, nil, 0o600))
	err = prepareSocket(path)
	require.ErrorContains(t, err, "it is not a socket")
	require.FileExists(t, path)
}

func TestLockFile(t *testing.T) {
	dir := t.TempDir()
	f, err := lockFile(filepath.Join(dir, "x.lock"), true, "--socket", "x")
	require.NoError(t, err)
	_, err = lockFile(filepath.Join(dir, "x.lock"), true, "--socket", "x")
	require.ErrorIs(t, err, errInUse)
	require.NoError(t, f.Close())
	f, err = lockFile(filepath.Join(dir, "x.lock"), true, "--socket", "x")
	require.NoError(t, err, "the lock goes with its holder")
	f.Close()
}

func TestRunExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"--help"}, &out, &errOut))
	require.Contains(t, out.String(), "Commands:")
	out.Reset()
	require.Equal(t, 0, run([]string{"service", "update", "--help"}, &out, &errOut))
	require.Contains(t, out.String(), "Examples:\n  actorlb service update --id 1 --frontend 10.96.0.10:80 --backends 10.0.1.5:8080")
	require.Equal(t, 2, run([]string{"service", "nope"}, &out, &errOut))
	require.Equal(t, 2, run([]string{"service", "get"}, &out, &errOut))
	require.Contains(t, errOut.String(), "service get: want one service ID, got 0 arguments")
	errOut.Reset()
	require.Equal(t, 1, run([]string{"status", "-H", "unix:///nonexistent/actorlb.sock"}, &out, &errOut))
	require.True(t, strings.HasPrefix(errOut.String(), "actorlb: health: agent unreachable"), errOut.String())
	var ue *usageError
	require.True(t, errors.As(dispatch([]string{"bpf", "lb", "list", "-o", "xml", "--bpf-root", "/nonexistent"}, &out, &errOut, nil), &ue))
}

// TestDocsAreCurrent: docs/cli is what `make docs` generates now.
func TestDocsAreCurrent(t *testing.T) {
	t.Setenv("ACTORLB_HOST", "")
	t.Setenv("ACTORLB_BPF_ROOT", "")
	dir := t.TempDir()
	require.NoError(t, genDocs(newRoot(io.Discard, io.Discard, nil), dir))
	want, err := os.ReadDir(dir)
	require.NoError(t, err)
	got, err := os.ReadDir("../../docs/cli")
	require.NoError(t, err, "run 'make docs'")
	require.Equal(t, len(want), len(got), "run 'make docs'")
	for _, f := range want {
		w, err := os.ReadFile(filepath.Join(dir, f.Name()))
		require.NoError(t, err)
		g, err := os.ReadFile(filepath.Join("../../docs/cli", f.Name()))
		require.NoError(t, err, "run 'make docs'")
		require.Equal(t, string(w), string(g), "%s is stale: run 'make docs'", f.Name())
	}
}

func TestLockFileIsNotFollowedThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	link := filepath.Join(dir, "s.sock.lock")
	require.NoError(t, os.Symlink(target, link))
	_, err := lockFile(link, true, "--socket", "s.sock")
	require.ErrorContains(t, err, "it is a symbolic link")
	_, err = os.Lstat(target)
	require.ErrorIs(t, err, os.ErrNotExist, "the lock created the link's target")
}

func TestLockFileIsRemovedByUnlockAndTakenAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock.lock")
	f, err := lockFile(path, true, "--socket", "s.sock")
	require.NoError(t, err)
	_, err = lockFile(path, true, "--socket", "s.sock")
	require.ErrorIs(t, err, errInUse)
	require.NoError(t, unlockFile(f, path))
	_, err = os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
	g, err := lockFile(path, true, "--socket", "s.sock")
	require.NoError(t, err)
	require.NoError(t, unlockFile(g, path))
}
