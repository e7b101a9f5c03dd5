package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process (etcd or the apiserver) whose stdout and
// stderr go to a log file, except the line "ready ARG" that it prints once
// it serves.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	ready   chan string   // receives ARG of the ready line
	done    chan struct{} // closed once the process has exited
	waitErr error         // the exit status, set before done closes
}

// startProc starts bin with args and waits, until ctx ends, for its ready
// line. A process that exits or does not get ready in time is killed and
// the error carries the tail of its log.
func startProc(ctx context.Context, name, bin string, args []string, logPath string) (*proc, string, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	// SIGKILL when the process that started it dies: no control plane
	// outlives a test binary killed by its timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := spawn(cmd); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, ready: make(chan string, 1), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if arg, ok := strings.CutPrefix(line, "ready "); ok && !sent {
				sent = true
				p.ready <- strings.TrimSpace(arg)
				continue
			}
			fmt.Fprintln(logf, line)
		}
		p.waitErr = cmd.Wait()
		fmt.Fprintf(logf, "=== %s exited: %v\n", time.Now().Format(time.RFC3339Nano), p.waitErr)
		logf.Close()
		close(p.done)
	}()

	select {
	case arg := <-p.ready:
		return p, arg, nil
	case <-p.done:
		return nil, "", fmt.Errorf("start %s: exited before ready (%v); log %s:\n%s", name, p.waitErr, logPath, logTail(logPath, 30))
	case <-ctx.Done():
		p.kill()
		return nil, "", fmt.Errorf("start %s: not ready: %w; log %s:\n%s", name, ctx.Err(), logPath, logTail(logPath, 30))
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace for the exit, then kills. The
// error reports an unclean exit (killed, or a non-zero status).
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return fmt.Errorf("stop %s: had exited already (%v)", p.name, p.waitErr)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("stop %s: %w; log %s:\n%s", p.name, p.waitErr, p.logPath, logTail(p.logPath, 20))
		}
		return nil
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("stop %s: still running %s after SIGTERM: killed", p.name, grace)
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// The spawner is one goroutine locked to its OS thread for the life of the
// process. Pdeathsig fires when the thread that forked the child exits,
// and Go ends threads (those of goroutines that exit while locked, as
// network-namespace code does): forking from this thread alone keeps the
// children alive exactly as long as the test process.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.err
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
