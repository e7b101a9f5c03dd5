package actorlb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/actorlb/actorlb/actors"
	"github.com/actorlb/actorlb/internal/actorsys"
	"github.com/actorlb/actorlb/internal/conntrack"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/sirupsen/logrus"
)

// DefaultConntrackInterval is how often the conntrack GC ticks unless
// ConntrackConfig.Interval says otherwise.
const DefaultConntrackInterval = 10 * time.Second

// DefaultConntrackPerTick bounds the entries one conntrack GC tick reads
// unless ConntrackConfig.PerTick says otherwise.
const DefaultConntrackPerTick = conntrack.DefaultPerTick

// ErrInvalidConntrackConfig occurs when a ConntrackConfig field is out of
// range; the error names the field.
var ErrInvalidConntrackConfig = conntrack.ErrInvalidConfig

// ConntrackTimeouts are the lifetimes of the packet datapath's conntrack
// entries: one expires when no packet of its flow came for its lifetime.
// A zero field takes SPEC17's default (10 s, 60 s, 21600 s, 60 s).
type ConntrackTimeouts struct {
	TCPClosing     time.Duration // TCP after a FIN or RST
	TCPNotReplied  time.Duration // TCP before any reply
	TCPEstablished time.Duration // other TCP
	Other          time.Duration // UDP and other protocols
}

// ConntrackConfig configures StartConntrackGC.
type ConntrackConfig struct {
	// Root is the bpffs directory the packet datapath pins lb4_ct,
	// lb4_ct_rev, lb6_ct and lb6_ct_rev in (maps.DefaultRoot if "").
	Root string
	// Interval between ticks (DefaultConntrackInterval if 0; negative:
	// no timer, ticks only on ConntrackGC.Tick).
	Interval time.Duration
	// PerTick bounds the entries a tick reads, over all four maps
	// (DefaultConntrackPerTick if 0; 16..1048576).
	PerTick int
	// Timeouts are the entries' lifetimes.
	Timeouts ConntrackTimeouts
	// Logger receives the GC's logs (logrus.StandardLogger if nil).
	Logger *logrus.Logger
	// clock replaces CLOCK_MONOTONIC (ns) for the package's tests: the
	// monotonic clock starts at boot, so a flow an hour old cannot be
	// written on a machine up for minutes.
	clock func() uint64
}

// ConntrackGC garbage-collects the packet datapath's conntrack maps: one
// actor ticks every Interval and deletes, at most PerTick entries per
// tick, the expired flows (forward entry and reverse partner) and the
// reverse entries whose flow is gone. Without pinned maps it idles.
type ConntrackGC struct {
	cfg     ConntrackConfig
	sys     *actor.ActorSystem
	pid     *actor.PID
	stopped chan struct{}
	close   sync.Once
	closed  chan struct{}
}

// ConntrackMapStats are one conntrack map's figures.
type ConntrackMapStats struct {
	Name    string // lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev
	Family  string // "ipv4" or "ipv6"
	Reverse bool
	// Present: pinned with SPEC17's shape at the current (or last) pass.
	Present bool
	// Entries kept by the map's last complete pass, in total and by
	// protocol.
	Entries         int
	TCP, UDP, Other int
	// Totals since start: entries read, and deleted because their flow
	// expired or (reverse maps) their forward entry was gone.
	Scanned        uint64
	DeletedExpired uint64
	DeletedOrphans uint64
}

// ConntrackStats are the conntrack GC's figures.
type ConntrackStats struct {
	Maps []ConntrackMapStats // lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev
	// Idle: no conntrack map pinned (no packet datapath attached).
	Idle bool
	// Ticks and complete passes; LastPass is the last pass's duration.
	Ticks, Passes uint64
	LastPass      time.Duration
	// Batch: batch lookups are used (else key iteration).
	Batch bool
	// LookupErrors: partner lookups that failed (the entry was kept).
	// Errors: ticks that failed; LastError the last ("" if none).
	LookupErrors, Errors uint64
	LastError            string
	Interval             time.Duration
	PerTick              int
}

// ConntrackTickReport says what one tick did.
type ConntrackTickReport struct {
	Scanned, Deleted int
	PassDone         bool // the tick ended a full pass over the maps
}

// StartConntrackGC checks cfg, starts the GC's actor and waits (under
// ctx) until it answers. Close stops it.
func StartConntrackGC(ctx context.Context, cfg ConntrackConfig) (*ConntrackGC, error) {
	cfg.Root = cmp.Or(cfg.Root, maps.DefaultRoot)
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultConntrackInterval
	}
	if cfg.Interval > 0 && cfg.Interval < 10*time.Millisecond {
		return nil, fmt.Errorf("start conntrack GC: Interval %s: must be at least 10ms (0: default %s; negative: no timer): %w", cfg.Interval, DefaultConntrackInterval, ErrInvalidConntrackConfig)
	}
	cfg.PerTick = cmp.Or(cfg.PerTick, DefaultConntrackPerTick)
	t := cfg.Timeouts
	s, err := conntrack.NewScanner(conntrack.Config{Root: cfg.Root, PerTick: cfg.PerTick, Timeouts: conntrack.Timeouts{
		TCPClosing: t.TCPClosing, TCPNotReplied: t.TCPNotReplied, TCPEstablished: t.TCPEstablished, Other: t.Other,
	}, Clock: cfg.clock})
	if err != nil {
		return nil, fmt.Errorf("start conntrack GC: %w", err)
	}
	log := logrus.NewEntry(cfg.Logger).WithField("component", "conntrack-gc")
	g := &ConntrackGC{cfg: cfg, stopped: make(chan struct{}), closed: make(chan struct{})}
	g.sys = actorsys.New(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(&logrusHandler{log: log.WithField("lib", "protoactor")})
		}),
		actor.WithDeadLetterRequestLogging(false),
	)
	var once sync.Once
	g.pid, err = g.sys.Root.SpawnNamed(actors.NewConntrackProps(actors.ConntrackConfig{
		Scanner: s, Interval: cfg.Interval, Log: log,
		OnStopped: func() { once.Do(func() { close(g.stopped) }) },
	}), actors.ConntrackName)
	if err != nil {
		s.Close()
		g.sys.Shutdown()
		return nil, fmt.Errorf("start conntrack GC: spawn: %w", err)
	}
	if _, err := g.Stats(ctx); err != nil {
		g.Close()
		return nil, fmt.Errorf("start conntrack GC: %w", err)
	}
	return g, nil
}

// Stats returns the GC's figures.
func (g *ConntrackGC) Stats(ctx context.Context) (ConntrackStats, error) {
	ch := make(chan conntrack.Stats, 1)
	if err := g.send(ctx, &messages.ConntrackStats{Reply: ch}); err != nil {
		return ConntrackStats{}, fmt.Errorf("conntrack stats: %w", err)
	}
	select {
	case st := <-ch:
		return g.stats(st), nil
	case <-g.closed:
		return ConntrackStats{}, fmt.Errorf("conntrack stats: %w", ErrClosed)
	case <-ctx.Done():
		return ConntrackStats{}, fmt.Errorf("conntrack stats: %w", ctx.Err())
	}
}

// Tick runs one bounded tick now, besides the timer's, and returns what
// it did and the first error it met.
func (g *ConntrackGC) Tick(ctx context.Context) (ConntrackTickReport, error) {
	ch := make(chan messages.ConntrackTickReply, 1)
	if err := g.send(ctx, &messages.ConntrackTick{Reply: ch}); err != nil {
		return ConntrackTickReport{}, fmt.Errorf("conntrack tick: %w", err)
	}
	select {
	case r := <-ch:
		rep := ConntrackTickReport{Scanned: r.Report.Scanned, Deleted: r.Report.Deleted, PassDone: r.Report.PassDone}
		if r.Err != nil {
			return rep, fmt.Errorf("conntrack tick: %w", r.Err)
		}
		return rep, nil
	case <-g.closed:
		return ConntrackTickReport{}, fmt.Errorf("conntrack tick: %w", ErrClosed)
	case <-ctx.Done():
		return ConntrackTickReport{}, fmt.Errorf("conntrack tick: %w", ctx.Err())
	}
}

func (g *ConntrackGC) send(ctx context.Context, msg any) error {
	select {
	case <-g.closed:
		return ErrClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.sys.Root.Send(g.pid, msg)
	return nil
}

// Close stops the GC's actor, which closes the maps (they stay pinned).
// It is safe to call more than once.
func (g *ConntrackGC) Close() error {
	var err error
	g.close.Do(func() {
		close(g.closed)
		g.sys.Root.Stop(g.pid)
		select {
		case <-g.stopped:
		case <-time.After(10 * time.Second):
			err = errors.New("close conntrack GC: the actor did not stop within 10s")
		}
		g.sys.Shutdown()
	})
	return err
}

func (g *ConntrackGC) stats(st conntrack.Stats) ConntrackStats {
	out := ConntrackStats{
		Idle: st.Idle, Ticks: st.Ticks, Passes: st.Passes, LastPass: st.LastPass, Batch: st.Batch,
		LookupErrors: st.LookupErrors, Errors: st.Errors, LastError: st.LastError,
		Interval: g.cfg.Interval, PerTick: g.cfg.PerTick,
	}
	for _, m := range st.Maps {
		fam := "ipv4"
		if m.Is6 {
			fam = "ipv6"
		}
		out.Maps = append(out.Maps, ConntrackMapStats{
			Name: m.Name, Family: fam, Reverse: m.Reverse, Present: m.Present, Entries: m.Entries,
			TCP: m.Alive.TCP, UDP: m.Alive.UDP, Other: m.Alive.Other,
			Scanned: m.Scanned, DeletedExpired: m.DeletedExpired, DeletedOrphans: m.DeletedOrphans,
		})
	}
	return out
}
