package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

// mapsDump is what GET /v1/lb/maps answers for the maps pinned under root
// that read d.
func mapsDump(root string, d table.Dump) api.MapsDump {
	return *api.NewMapsDump(root, actorlb.MapEntries(d))
}

// binary is the actorlb binary built by TestMain.
var binary string

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// TestMain builds the binary once (with -race when the tests run with it,
// so the agent is checked for races too and reuses the cached packages).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "actorlb-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create build dir:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "actorlb")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool(), append(args, "github.com/actorlb/actorlb/cmd/actorlb")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build actorlb:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "built %s in %s (race %v)\n", binary, time.Since(start).Round(time.Millisecond), raceEnabled)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// childEnv is the environment of the binary's runs: the race runtime's
// one-second sleep at exit is turned off (it would add a second to every
// CLI run).
func childEnv() []string {
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	return append(os.Environ(), "GORACE="+gorace)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shortDir returns a fresh directory with a short path (unix socket paths
// are limited to 108 bytes; t.TempDir's can be longer), removed at the end.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "alb")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// agent is an `actorlb agent` subprocess.
type agent struct {
	root, socket string
	cmd          *exec.Cmd
	stdout       *syncBuffer
	stderr       *syncBuffer
	done         chan struct{}
	exitErr      error
	client       *api.Client
	stopped      bool
}

// Bounds of the readiness and stop loops.
const (
	readyTimeout = 20 * time.Second
	readyPoll    = 25 * time.Millisecond
	stopTimeout  = 20 * time.Second
)

// startAgent starts an agent on maps pinned under root (a fresh bpffs
// directory if "") with its own socket, waits until /v1/healthz answers
// 200, and stops it with SIGTERM when t ends (it must exit 0).
func startAgent(t testing.TB, root string, extra ...string) *agent {
	t.Helper()
	if root == "" {
		root = testutil.PinDir(t)
	}
	a := launch(t, root, filepath.Join(shortDir(t), "s.sock"), extra...)
	a.waitReady(t)
	t.Cleanup(func() { a.stop(t) })
	return a
}

// launch starts the subprocess without waiting for it.
func launch(t testing.TB, root, socket string, extra ...string) *agent {
	t.Helper()
	a := &agent{root: root, socket: socket, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	// --socket-lb=false: test agents must not attach to the host's cgroup.
	args := append([]string{"agent", "--bpf-root", root, "--socket", socket, "--socket-lb=false"}, extra...)
	a.cmd = exec.Command(binary, args...)
	a.cmd.Env = childEnv()
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	require.NoError(t, a.cmd.Start())
	go func() {
		a.exitErr = a.cmd.Wait()
		close(a.done)
	}()
	c, err := api.NewClient("unix://" + socket)
	require.NoError(t, err)
	a.client = c
	return a
}

func (a *agent) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func (a *agent) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for i := 0; time.Now().Before(deadline); i++ {
		if a.exited() {
			t.Fatalf("agent exited before it was ready: %v\nstdout:\n%s\nstderr:\n%s", a.exitErr, a.stdout, a.stderr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := a.client.Health(ctx)
		cancel()
		if err == nil && st.Ready {
			require.Contains(t, a.stdout.String(), "actorlb agent ready: API on unix://"+a.socket)
			return
		}
		time.Sleep(readyPoll)
	}
	t.Fatalf("agent not ready after %s\nstdout:\n%s\nstderr:\n%s", readyTimeout, a.stdout, a.stderr)
}

// signal sends sig and waits for the exit; it returns the exit code.
func (a *agent) signal(t testing.TB, sig syscall.Signal) int {
	t.Helper()
	if a.stopped {
		return a.cmd.ProcessState.ExitCode()
	}
	a.stopped = true
	a.client.Close()
	require.NoError(t, a.cmd.Process.Signal(sig))
	select {
	case <-a.done:
	case <-time.After(stopTimeout):
		_ = a.cmd.Process.Kill()
		<-a.done
		t.Fatalf("agent did not stop within %s after %s\nstderr:\n%s", stopTimeout, sig, a.stderr)
	}
	require.NotContains(t, a.stderr.String(), "DATA RACE", "the agent has a data race")
	return a.cmd.ProcessState.ExitCode()
}

// stop stops the agent with SIGTERM and checks that it exited cleanly.
func (a *agent) stop(t testing.TB) {
	t.Helper()
	if a.stopped {
		return
	}
	code := a.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, code, "agent exit code\nstdout:\n%s\nstderr:\n%s", a.stdout, a.stderr)
	require.Contains(t, a.stdout.String(), "actorlb agent stopped; maps stay pinned")
}

var tcpURL = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)

// tcpURL returns the http:// address the agent printed (with --api-addr).
func (a *agent) tcpURL(t testing.TB) string {
	t.Helper()
	u := tcpURL.FindString(a.stdout.String())
	require.NotEmpty(t, u, "no TCP address in %q", a.stdout)
	return u
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cliResult is the outcome of one CLI run.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the binary with args (bounded to 30 s).
func runCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = childEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run actorlb %v: %v", args, err)
	}
	require.NotContains(t, errOut.String(), "DATA RACE")
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: cmd.ProcessState.ExitCode()}
}

// cli runs a client command against a, adding -H.
func (a *agent) cli(t testing.TB, args ...string) cliResult {
	t.Helper()
	return runCLI(t, append(args, "-H", "unix://"+a.socket)...)
}

// bpf runs a `bpf lb` command on a's pin directory.
func (a *agent) bpf(t testing.TB, args ...string) cliResult {
	t.Helper()
	return runCLI(t, append(append([]string{"bpf", "lb"}, args...), "--bpf-root", a.root)...)
}

// rawResponse is an HTTP answer read completely.
type rawResponse struct {
	code int
	body []byte
	hdr  http.Header
}

// do sends a raw request to the agent over its socket.
func (a *agent) do(t testing.TB, method, path string, body io.Reader) rawResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, a.client.URL(path), body)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.HTTPClient().Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return rawResponse{code: resp.StatusCode, body: data, hdr: resp.Header}
}

func (a *agent) doString(t testing.TB, method, path, body string) rawResponse {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return a.do(t, method, path, r)
}
