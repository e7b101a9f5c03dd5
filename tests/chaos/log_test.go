package chaos

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/writer"
	"github.com/stretchr/testify/require"
)

// reconcileLog keeps the last warnings the engine logs about its
// reconciles (a repair, a reconcile that failed), so that a chaos failure
// says what the engine saw and with which kernel error, while the test's
// output keeps only errors.
type reconcileLog struct {
	mu   sync.Mutex
	last []string // the newest reconcileLogKeep, oldest first
	n    int
}

const reconcileLogKeep = 16

func (r *reconcileLog) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }

func (r *reconcileLog) Fire(e *logrus.Entry) error {
	if !strings.Contains(e.Message, "reconcile") && !strings.Contains(e.Message, "drift") {
		return nil
	}
	line, err := e.String()
	if err != nil {
		line = e.Message
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if len(r.last) == reconcileLogKeep {
		r.last = r.last[1:]
	}
	r.last = append(r.last, strings.TrimSpace(line))
	return nil
}

// String lists the kept warnings and how many there were in all.
func (r *reconcileLog) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%d reconcile warnings, the last %d:\n%s", r.n, len(r.last), strings.Join(r.last, "\n"))
}

// chaosLogger logs errors to stderr and hands warnings about reconciles
// to r; CHAOS_LOG=<level> prints everything at that level instead (r sees
// warnings when the level lets them through).
func chaosLogger(r *reconcileLog) *logrus.Logger {
	log := logrus.New()
	log.AddHook(r)
	if lvl, err := logrus.ParseLevel(os.Getenv("CHAOS_LOG")); err == nil {
		log.SetLevel(lvl)
		return log
	}
	log.SetLevel(logrus.WarnLevel)
	log.SetOutput(io.Discard)
	log.AddHook(&writer.Hook{Writer: os.Stderr, LogLevels: []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel}})
	return log
}

func TestReconcileLogKeepsTheLastWarningsAboutReconciles(t *testing.T) {
	t.Setenv("CHAOS_LOG", "")
	r := &reconcileLog{}
	log := chaosLogger(r)
	log.Warn("a write failed") // not about reconciles: not kept
	for i := range reconcileLogKeep + 2 {
		log.WithField("map", "lb4_source_range").WithField("i", i).Warn("map drifted from what actorlb wrote: repaired")
	}
	log.WithError(errors.New("check pin: cannot allocate memory")).Warn("periodic reconcile failed")
	s := r.String()
	require.Contains(t, s, fmt.Sprintf("%d reconcile warnings, the last %d:", reconcileLogKeep+3, reconcileLogKeep))
	require.NotContains(t, s, "a write failed")
	require.NotContains(t, s, "i=0 ", "the oldest went")
	require.Contains(t, s, fmt.Sprintf("i=%d", reconcileLogKeep+1))
	require.Contains(t, s, "cannot allocate memory")
}
