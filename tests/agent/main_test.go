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
	"strconv"
	"strings"
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
	if left := children(); len(left) > 0 {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		fmt.Fprintf(os.Stderr, "FAIL: %d processes started by the tests outlived them (pids %v, killed now): a test that starts a process must stop it in t.Cleanup\n", len(left), left)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// children returns the processes whose parent is this test process (alive
// or zombies nobody waited for), read from /proc.
func children() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		fmt.Fprintln(os.Stderr, "list child processes:", err)
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(self) {
			out = append(out, pid)
		}
	}
	return out
}

// childEnv is the environment of the binary's runs: the race runtime's
// one-second sleep at exit is turned off (it would add a second to every
// CLI run).
func childEnv() []string {
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	return append(os.Environ(), "GORACE="+gorace)
}

// outFile is a file the agent writes its stdout or stderr to directly: no
// pipe and no copying goroutine in between, so whatever the agent wrote
// before something the test observes (an HTTP answer, its exit) is in the
// file when the test reads it.
type outFile struct{ path string }

// createOut creates the file for one of the agent's outputs.
func createOut(t testing.TB, dir, name string) (outFile, *os.File) {
	t.Helper()
	o := outFile{path: filepath.Join(dir, name)}
	f, err := os.Create(o.path)
	require.NoError(t, err)
	return o, f
}

// String returns what the agent has written so far.
func (o outFile) String() string {
	b, err := os.ReadFile(o.path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", o.path, err)
	}
	return string(b)
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
	stdout       outFile
	stderr       outFile
	done         chan struct{}
	exitErr      error
	client       *api.Client
	stopped      bool
}

// Bounds of the readiness and stop loops.
const (
	readyTimeout = 20 * time.Second
	readyPoll    = 25 * time.Millisecond
	// healthTimeout bounds one /v1/healthz call of waitReady (generous:
	// the machine may be loaded, and an unbound socket fails at once).
	healthTimeout = 10 * time.Second
	stopTimeout   = 20 * time.Second
)

// startAgent starts an agent on maps pinned under root (a fresh bpffs
// directory if "") with its own socket, waits until it is ready, and stops
// it with SIGTERM when t ends (it must exit 0).
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

// launch starts the subprocess without waiting for it. When t ends, failing
// or not, an agent still running is killed and waited for; in a test that
// has not failed that is an error of its own (the test should have stopped
// it and checked how it stopped).
func launch(t testing.TB, root, socket string, extra ...string) *agent {
	t.Helper()
	out, f := createOut(t, t.TempDir(), "stdout")
	defer f.Close()
	a := launchTo(t, f, root, socket, extra...)
	a.stdout = out
	return a
}

// launchTo is launch with the agent's stdout on the file given (the caller
// closes its copy; a.stdout is left empty).
func launchTo(t testing.TB, stdout *os.File, root, socket string, extra ...string) *agent {
	t.Helper()
	return launchBin(t, binary, stdout, root, socket, extra...)
}

// launchBin is launchTo with the binary bin.
func launchBin(t testing.TB, bin string, stdout *os.File, root, socket string, extra ...string) *agent {
	t.Helper()
	a := &agent{root: root, socket: socket, done: make(chan struct{})}
	var stderr *os.File
	a.stderr, stderr = createOut(t, t.TempDir(), "stderr")
	defer stderr.Close()
	// --socket-lb=false: test agents must not attach to the host's cgroup.
	args := append([]string{"agent", "--bpf-root", root, "--socket", socket, "--socket-lb=false"}, extra...)
	a.cmd = exec.Command(bin, args...)
	a.cmd.Env = childEnv()
	a.cmd.Stdout, a.cmd.Stderr = stdout, stderr
	require.NoError(t, a.cmd.Start())
	go func() {
		a.exitErr = a.cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() { a.reap(t) })
	c, err := api.NewClient("unix://" + socket)
	require.NoError(t, err)
	a.client = c
	return a
}

// reap kills the agent if it still runs and waits for it to exit.
func (a *agent) reap(t testing.TB) {
	t.Helper()
	if a.client != nil {
		a.client.Close()
	}
	if a.exited() {
		return
	}
	pid := a.cmd.Process.Pid
	_ = a.cmd.Process.Kill()
	select {
	case <-a.done:
	case <-time.After(stopTimeout):
		t.Errorf("agent (pid %d) still runs %s after SIGKILL", pid, stopTimeout)
		return
	}
	a.stopped = true
	if !t.Failed() {
		t.Errorf("agent (pid %d) was still running when the test ended; killed it (stop it in the test, or use startAgent)", pid)
	}
}

func (a *agent) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// readyLine is how the ready line the agent prints begins.
func (a *agent) readyLine() string { return "actorlb agent ready: API on unix://" + a.socket }

// waitReady waits until the agent is ready and checks the contract of its
// announcement both ways, whatever the interleaving: once the ready line
// is on stdout, the first /v1/healthz call (no retry) answers 200; and a
// /v1/healthz 200 never comes before the line (stdout is a file the agent
// writes directly, so a line printed before the answer is there).
func (a *agent) waitReady(t testing.TB) {
	t.Helper()
	line := a.readyLine()
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if a.exited() {
			t.Fatalf("agent exited before it was ready: %v\nstdout:\n%s\nstderr:\n%s", a.exitErr, a.stdout, a.stderr)
		}
		printed := strings.Contains(a.stdout.String(), line)
		ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
		st, err := a.client.Health(ctx)
		cancel()
		if printed {
			require.NoError(t, err, "/v1/healthz right after the ready line\nstderr:\n%s", a.stderr)
			require.True(t, st.Ready, "/v1/healthz right after the ready line: %+v", st)
			return
		}
		if err == nil && st.Ready {
			require.Contains(t, a.stdout.String(), line, "/v1/healthz answered ready before the agent printed its ready line")
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
	return runCLIEnv(t, nil, args...)
}

// runCLIEnv is runCLI with env added to the environment.
func runCLIEnv(t testing.TB, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(childEnv(), env...)
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
