package actors

import (
	"time"

	"github.com/actorlb/actorlb/internal/conntrack"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/sirupsen/logrus"
)

// ConntrackName names the conntrack GC actor.
const ConntrackName = "conntrack"

// ConntrackConfig configures the conntrack GC actor.
type ConntrackConfig struct {
	// Scanner is the GC's scanner; the actor owns it from spawn on and
	// closes it when it stops.
	Scanner *conntrack.Scanner
	// Interval between the timer's ticks; <= 0: no timer, ticks only on
	// messages.ConntrackTick.
	Interval time.Duration
	Log      *logrus.Entry
	// OnStopped, if set, is called once the actor has stopped and closed
	// the scanner.
	OnStopped func()
}

// timerTick is the tick the actor's timer sends it.
type timerTick struct{}

// conntrackActor owns a conntrack.Scanner: one bounded tick per timer
// message (the timer is set again only once the tick is done, so ticks
// never queue up), ticks on demand, and its stats. It logs when the maps
// appear or vanish and when the error changes, not at every tick.
type conntrackActor struct {
	cfg     ConntrackConfig
	timer   *time.Timer
	idle    *bool // nil until the first pass
	lastErr string
}

// NewConntrackProps returns the props of the conntrack GC actor.
func NewConntrackProps(cfg ConntrackConfig) *actor.Props {
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	return actor.PropsFromProducer(func() actor.Actor { return &conntrackActor{cfg: cfg} })
}

func (a *conntrackActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.schedule(ctx)
	case *timerTick:
		a.tick()
		a.schedule(ctx)
	case *messages.ConntrackTick:
		rep, err := a.tick()
		if m.Reply != nil {
			m.Reply <- messages.ConntrackTickReply{Report: rep, Err: err}
		}
	case *messages.ConntrackStats:
		m.Reply <- a.cfg.Scanner.Stats()
	case *actor.Restarting, *actor.Stopping:
		a.stopTimer()
	case *actor.Stopped:
		a.stopTimer()
		if err := a.cfg.Scanner.Close(); err != nil {
			a.cfg.Log.WithError(err).Warn("conntrack GC: closing the maps failed")
		}
		if a.cfg.OnStopped != nil {
			a.cfg.OnStopped()
		}
	}
}

func (a *conntrackActor) schedule(ctx actor.Context) {
	a.stopTimer()
	if a.cfg.Interval <= 0 {
		return
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.timer = time.AfterFunc(a.cfg.Interval, func() { root.Send(self, &timerTick{}) })
}

func (a *conntrackActor) stopTimer() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// tick runs one bounded tick and logs what changed.
func (a *conntrackActor) tick() (conntrack.TickReport, error) {
	rep, err := a.cfg.Scanner.Tick()
	st := a.cfg.Scanner.Stats()
	log := a.cfg.Log
	if rep.PassDone && (a.idle == nil || *a.idle != st.Idle) {
		idle := st.Idle
		a.idle = &idle
		if idle {
			log.Info("conntrack GC: no conntrack map is pinned (no packet datapath attached); idle, looking again at every tick")
		} else {
			var names []string
			for _, m := range st.Maps {
				if m.Present {
					names = append(names, m.Name)
				}
			}
			log.WithField("maps", names).Info("conntrack GC: collecting the datapath's conntrack maps")
		}
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != a.lastErr {
		if err != nil {
			log.WithError(err).Warn("conntrack GC: tick failed (the next pass tries again)")
		} else {
			log.Info("conntrack GC: ticks succeed again")
		}
		a.lastErr = msg
	}
	if rep.Deleted > 0 {
		log.WithFields(logrus.Fields{"scanned": rep.Scanned, "deleted": rep.Deleted}).Debug("conntrack GC: tick")
	}
	return rep, err
}
