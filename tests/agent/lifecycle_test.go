package agent_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// runAgentToExit runs an agent that must refuse to start, and returns its
// exit code and stderr.
func runAgentToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r := runCLI(t, append([]string{"agent", "--socket-lb=false"}, args...)...)
	require.NotContains(t, r.stdout, "ready", "the agent must not start")
	return r.code, r.stderr
}

// TestRestartRestoresAndVerifyRepairs: the maps outlive the agent; the CLI
// reads them with no agent; a corruption is reported by verify and repaired
// by the next start.
func TestRestartRestoresAndVerifyRepairs(t *testing.T) {
	root := testutil.PinDir(t)
	a := startAgent(t, root)
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080,10.0.1.6:8080"))
	requireOK(t, a.cli(t, "service", "update", "--id", "2", "--frontend", "10.96.0.11:80", "--backends", "10.0.1.6:8080"))
	before, err := verify.DumpPinned(root)
	require.NoError(t, err)
	a.stop(t)
	for _, n := range maps.Names {
		_, err := os.Stat(filepath.Join(root, n))
		require.NoError(t, err, "%s stays pinned", n)
	}

	// No agent: the bpf commands still work.
	out := requireOK(t, a.bpf(t, "list"))
	require.Contains(t, out, "10.0.1.6:8080/TCP (2) (1)")
	requireOK(t, a.bpf(t, "verify"))

	// A warm restart restores the same IDs and writes nothing.
	b := startAgent(t, root)
	require.Contains(t, b.stdout.String(), "restored 2 services, 2 backends, 0 orphan revNAT entries deleted, 0 repairs (0 map writes)")
	svc, err := b.client.GetService(ctxT(t), 2)
	require.NoError(t, err)
	require.Equal(t, "10.96.0.11", svc.Spec.FrontendAddress.IP)
	after, err := verify.DumpPinned(root)
	require.NoError(t, err)
	require.Equal(t, mapsDump(root, before), mapsDump(root, after))
	st, err := b.client.Health(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 2, st.Restore.Services)
	b.stop(t)

	// Corrupt the maps while no agent runs: drop a backend that two slots
	// use and the revNAT entry of service 2.
	m, err := maps.Open(maps.Config{Root: root})
	require.NoError(t, err)
	var shared uint32
	for _, e := range before.Backends4 {
		if e.Value.Address.String() == "10.0.1.6" {
			shared = e.ID
		}
	}
	require.NotZero(t, shared)
	require.NoError(t, m.Backend4.Delete([]uint32{shared}))
	require.NoError(t, m.RevNAT4.Delete([]uint16{2}))
	require.NoError(t, m.Close())

	r := b.bpf(t, "verify")
	require.Equal(t, 1, r.code, r.stdout)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Contains(t, lines[0], "invariant 2 (dangling-slot) ipv4 service 1 10.96.0.10:80/TCP: slot ")
	require.Contains(t, lines[1], "invariant 2 (dangling-slot) ipv4 service 2 10.96.0.11:80/TCP: slot 1 points to missing backend")
	require.Equal(t, "invariant 3 (missing-revnat) ipv4 service 2 10.96.0.11:80/TCP: no entry for service ID 2 in lb4_reverse_nat", lines[2])
	require.Equal(t, "actorlb: 3 violations of the map invariants in 2 services, 1 backend, 1 revNAT entry (the agent repairs them at its next start)\n", r.stderr)
	r = b.bpf(t, "verify", "-o", "json")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, `"ok": false`)
	require.Contains(t, r.stdout, `"kind": "missing-revnat"`)

	// The next start repairs; verify passes again.
	c := startAgent(t, root)
	require.Regexp(t, `restored 2 services, 1 backend, 0 orphan revNAT entries deleted, [1-9]\d* repairs \([1-9]\d* map writes\)`, c.stdout.String())
	requireOK(t, c.bpf(t, "verify"))
	st, err = c.client.Health(ctxT(t))
	require.NoError(t, err)
	require.NotZero(t, st.Restore.RepairsByKind["dangling-slot"])
	require.NotZero(t, st.Restore.RepairsByKind["missing-revnat"])
	require.Contains(t, requireOK(t, c.cli(t, "status")), "dangling-slot: 2")
}

func TestSIGINTStopsCleanly(t *testing.T) {
	a := startAgent(t, "")
	require.Equal(t, 0, a.signal(t, syscall.SIGINT), a.stderr.String())
	require.Contains(t, a.stdout.String(), "actorlb agent stopped; maps stay pinned in "+a.root)
	require.Contains(t, a.stderr.String(), "shutting down; maps stay pinned")
	_, err := os.Stat(a.socket)
	require.ErrorIs(t, err, os.ErrNotExist, "the socket is removed")
	_, err = os.Lstat(a.socket + ".lock")
	require.ErrorIs(t, err, os.ErrNotExist, "the lock file is removed")
}

func TestSocket(t *testing.T) {
	a := startAgent(t, "")
	fi, err := os.Stat(a.socket)
	require.NoError(t, err)
	require.Equal(t, os.ModeSocket|0o660, fi.Mode()&(os.ModeSocket|os.ModePerm), "socket mode %s", fi.Mode())

	t.Run("second agent on the same socket", func(t *testing.T) {
		code, stderr := runAgentToExit(t, "--bpf-root", testutil.PinDir(t), "--socket", a.socket)
		require.Equal(t, 1, code)
		require.Equal(t, "actorlb: agent: --socket "+a.socket+": in use by another agent (stop it first, or pick another --socket)\n", stderr)
	})
	t.Run("second agent on the same maps", func(t *testing.T) {
		code, stderr := runAgentToExit(t, "--bpf-root", a.root, "--socket", filepath.Join(shortDir(t), "s.sock"))
		require.Equal(t, 1, code)
		require.Equal(t, "actorlb: agent: --bpf-root "+a.root+": in use by another agent (stop it first, or pick another --bpf-root)\n", stderr)
	})
	t.Run("stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(shortDir(t), "s.sock")
		l, err := net.Listen("unix", path)
		require.NoError(t, err)
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		require.NoError(t, l.Close())
		_, err = os.Stat(path)
		require.NoError(t, err, "a stale socket file is left")
		b := launch(t, testutil.PinDir(t), path)
		b.waitReady(t)
		b.stop(t)
	})
	t.Run("a live listener is not replaced", func(t *testing.T) {
		path := filepath.Join(shortDir(t), "s.sock")
		l, err := net.Listen("unix", path)
		require.NoError(t, err)
		defer l.Close()
		code, stderr := runAgentToExit(t, "--bpf-root", testutil.PinDir(t), "--socket", path)
		require.Equal(t, 1, code)
		require.Equal(t, "actorlb: agent: socket "+path+": in use by another agent: something listens on it (stop it first, or pick another --socket)\n", stderr)
	})
	t.Run("a regular file is not replaced", func(t *testing.T) {
		path := filepath.Join(shortDir(t), "s.sock")
		require.NoError(t, os.WriteFile(path, []byte("keep"), 0o644))
		code, stderr := runAgentToExit(t, "--bpf-root", testutil.PinDir(t), "--socket", path)
		require.Equal(t, 1, code)
		require.Equal(t, "actorlb: agent: refusing to replace "+path+": it is not a socket (remove it, or pick another --socket)\n", stderr)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, "keep", string(b))
	})
}

func TestAgentFlags(t *testing.T) {
	sock := filepath.Join(shortDir(t), "s.sock")
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--api-addr", "0.0.0.0:0"}, "actorlb: refusing --api-addr 0.0.0.0:0: not a loopback address (its token would travel in clear text; use 127.0.0.1 or [::1], or pass --api-allow-remote to serve it on other addresses anyway)\n"},
		{[]string{"--api-addr", ":8080"}, "actorlb: refusing --api-addr :8080: not a loopback address (its token would travel in clear text; use 127.0.0.1 or [::1], or pass --api-allow-remote to serve it on other addresses anyway)\n"},
		{[]string{"--api-addr", "10.1.2.3:80"}, "actorlb: refusing --api-addr 10.1.2.3:80: not a loopback address (its token would travel in clear text; use 127.0.0.1 or [::1], or pass --api-allow-remote to serve it on other addresses anyway)\n"},
		{[]string{"--api-addr", "8080"}, "actorlb: invalid --api-addr \"8080\": want IP:PORT, like 127.0.0.1:8080\n"},
		{[]string{"--api-addr", "example.com:80"}, "actorlb: invalid --api-addr \"example.com:80\": the host must be an IP address or localhost\n"},
		{[]string{"--api-addr", "127.0.0.1:99999"}, "actorlb: invalid --api-addr \"127.0.0.1:99999\": the port must be a number between 0 and 65535\n"},
		{[]string{"--api-addr", "127.0.0.1:0"}, "actorlb: refusing --api-addr 127.0.0.1:0: the TCP listener needs a token (pass --api-token-file FILE, and --token-file FILE to the clients; or --api-insecure to let any local user control the load balancer)\n"},
		{[]string{"--api-addr", "127.0.0.1:0", "--api-token-file", "/nonexistent/token"}, "actorlb: invalid --api-token-file: read token file: stat /nonexistent/token: no such file or directory\n"},
		{[]string{"--socket-group", "no-such-group-actorlb"}, "actorlb: invalid --socket-group \"no-such-group-actorlb\": no such group\n"},
		{[]string{"--map-max", "0"}, "actorlb: invalid --map-max 0: must be between 1 and 16777216\n"},
		{[]string{"--maglev-table-size", "1000"}, "actorlb: invalid --maglev-table-size 1000: want a prime in [251, 131071] (for example 251, 1021, 4093, 16381, 65521, 131071)\n"},
		{[]string{"--dry-run=false", "--socket-lb", "--socket-lb-cgroup", "/tmp"}, "actorlb: invalid --socket-lb-cgroup /tmp: not a cgroup v2 directory\n"},
		{[]string{"--log-level", "loud"}, "actorlb: invalid --log-level \"loud\": want trace, debug, info, warn or error\n"},
		{[]string{"--log-format", "xml"}, "actorlb: invalid --log-format \"xml\": want text or json\n"},
		{[]string{"extra"}, "actorlb: agent: want only flags, got 1 arguments (run 'actorlb agent --help')\n"},
	} {
		code, stderr := runAgentToExit(t, append([]string{"--dry-run", "--socket", sock}, tc.args...)...)
		require.Equal(t, 2, code, "%v", tc.args)
		require.Equal(t, tc.stderr, stderr, "%v", tc.args)
	}
	_, err := os.Stat(sock)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestDryRun(t *testing.T) {
	root := testutil.PinDir(t)
	a := startAgent(t, root, "--dry-run", "--log-format", "json")
	require.Contains(t, a.stdout.String(), "maps in memory (dry run)")
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	dump, err := a.client.Maps(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, dump.Root)
	require.Len(t, dump.Services4, 2)
	st, err := a.client.Health(ctxT(t))
	require.NoError(t, err)
	require.True(t, st.DryRun)
	ents, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, ents, "a dry run pins nothing")
	require.Contains(t, a.stderr.String(), `"msg":"restored from pinned maps"`, "json logs")
}

func TestRestoreFalseEmptiesTheMaps(t *testing.T) {
	root := testutil.PinDir(t)
	a := startAgent(t, root)
	requireOK(t, a.cli(t, "service", "update", "--id", "1", "--frontend", "10.96.0.10:80", "--backends", "10.0.1.5:8080"))
	a.stop(t)
	b := startAgent(t, root, "--restore=false")
	list, err := b.client.ListServices(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, list)
	d, err := verify.DumpPinned(root)
	require.NoError(t, err)
	require.Empty(t, d.Services4)
	require.Empty(t, d.Backends4)
	require.Empty(t, d.RevNAT4)
}

// TestShutdownAnswersInFlight: requests racing with SIGTERM get an answer
// or a refused connection, never a hang, and the agent exits 0.
func TestShutdownAnswersInFlight(t *testing.T) {
	a := startAgent(t, "")
	done := make(chan struct{})
	ctx := ctxT(t)
	go func() {
		defer close(done)
		deadline := time.Now().Add(5 * time.Second)
		for i := 0; i < 200 && time.Now().Before(deadline); i++ {
			spec := &api.ServiceSpec{FrontendAddress: &api.FrontendAddress{IP: "10.96.1.1", Port: uint16(1000 + i)}}
			if _, _, err := a.client.PutService(ctx, lb.ServiceID(100+i), spec); err != nil {
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	a.stop(t)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a request hung across the shutdown")
	}
}

// TestNothingAnswersBeforeTheReadyLine holds the agent to its ready
// contract whatever the timing: its stdout is a pipe the test has filled,
// so printing the ready line blocks until the test reads. Meanwhile a
// connection to the socket is accepted by the kernel (whoever waits for
// the line can connect at once) but gets no answer, and systemd is not
// told READY=1; once the test has read the line, READY=1 comes and that
// same connection gets /v1/healthz 200.
func TestNothingAnswersBeforeTheReadyLine(t *testing.T) {
	notifyPath := filepath.Join(shortDir(t), "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { notify.Close() })
	t.Setenv("NOTIFY_SOCKET", notifyPath)
	readNotify := func(wait time.Duration) (string, error) {
		require.NoError(t, notify.SetReadDeadline(time.Now().Add(wait)))
		buf := make([]byte, 256)
		n, err := notify.Read(buf)
		return string(buf[:n]), err
	}

	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	// Fill the pipe: write until a write would block.
	var filled int64
	chunk := make([]byte, 4096)
	for range 1 << 12 { // bounded: pipes hold at most a few MiB
		require.NoError(t, w.SetWriteDeadline(time.Now().Add(50*time.Millisecond)))
		n, err := w.Write(chunk)
		filled += int64(n)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		require.NoError(t, err)
	}
	require.Positive(t, filled)

	a := launchTo(t, w, testutil.PinDir(t), filepath.Join(shortDir(t), "s.sock"))
	require.NoError(t, w.Close()) // the agent holds the write end now

	// Connect as soon as the socket listens.
	var conn net.Conn
	deadline := time.Now().Add(readyTimeout)
	for conn == nil {
		require.False(t, a.exited(), "agent exited: %v\nstderr:\n%s", a.exitErr, a.stderr)
		require.True(t, time.Now().Before(deadline), "the socket does not listen after %s\nstderr:\n%s", readyTimeout, a.stderr)
		if c, err := net.Dial("unix", a.socket); err == nil {
			conn = c
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	defer conn.Close()
	_, err = conn.Write([]byte("GET /v1/healthz HTTP/1.1\r\nHost: actorlb\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Second)))
	var one [1]byte
	_, err = conn.Read(one[:])
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the agent answered before it printed its ready line")
	msg, err := readNotify(10 * time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "systemd got %q before the ready line was printed", msg)

	// Read the filler, then the ready line.
	require.NoError(t, r.SetReadDeadline(time.Now().Add(readyTimeout)))
	br := bufio.NewReader(r)
	_, err = io.CopyN(io.Discard, br, filled)
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err, "stderr:\n%s", a.stderr)
	require.True(t, strings.HasPrefix(line, a.readyLine()), "first line on stdout: %q", line)
	require.NoError(t, r.SetReadDeadline(time.Time{}))
	var rest bytes.Buffer
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(&rest, br) // until the agent exits (EOF)
	}()

	msg, err = readNotify(healthTimeout)
	require.NoError(t, err)
	require.Equal(t, "READY=1", msg)

	// The connection made before the line is answered now.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(healthTimeout)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"ready":true`)

	require.Equal(t, 0, a.signal(t, syscall.SIGTERM), "stderr:\n%s", a.stderr)
	select {
	case <-drained:
	case <-time.After(stopTimeout):
		t.Fatal("stdout not closed after the agent exited")
	}
	require.Contains(t, rest.String(), "actorlb agent stopped; maps stay pinned")
	msg, err = readNotify(healthTimeout)
	require.NoError(t, err)
	require.Equal(t, "STOPPING=1", msg)
}
