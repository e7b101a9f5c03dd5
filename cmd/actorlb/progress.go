package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// progressMin is the number of services from which apply and delete
// report progress.
const progressMin = 1000

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress reports how far a long operation is, on stderr: a bar redrawn
// in place on a terminal, plain lines otherwise (one per chunk), nothing
// for fewer than progressMin items.
type progress struct {
	w     io.Writer
	what  string
	total int
	tty   bool
	off   bool
}

func newProgress(w io.Writer, what string, total int) *progress {
	return &progress{w: w, what: what, total: total, tty: isTerminal(w), off: total < progressMin}
}

// update reports done of total.
func (p *progress) update(done int) {
	if p.off {
		return
	}
	if !p.tty {
		fmt.Fprintf(p.w, "%s: %d of %d services\n", p.what, done, p.total)
		return
	}
	const width = 30
	n := width * done / p.total
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d", p.what, strings.Repeat("=", n), strings.Repeat(" ", width-n), done, p.total)
}

// done ends the bar's line.
func (p *progress) done() {
	if !p.off && p.tty {
		fmt.Fprintln(p.w)
	}
}
