package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// KeeperName names the top-level keeper; its one child is the supervisor
// (SupervisorName), whose PID is "actorlb/supervisor": one name for the
// actor, its PID and its restart count.
const (
	KeeperName = "actorlb"
	// SupervisorPID is the Id of the supervisor's PID.
	SupervisorPID = KeeperName + "/" + SupervisorName
)

// keeper is the top-level actor. Its only child is the supervisor: it
// restarts it when it fails (one-for-one) and spawns it again when it is
// stopped from outside, so the engine always comes back and restores.
type keeper struct {
	props     *actor.Props
	stopping  bool
	onStopped func()
}

// NewKeeperProps returns the props of the keeper for a supervisor config;
// supervisorMiddleware is added to the supervisor (failure injection).
func NewKeeperProps(cfg Config, supervisorMiddleware ...actor.ReceiverMiddleware) *actor.Props {
	if cfg.MaxRestarts == 0 {
		cfg.MaxRestarts = 10
	}
	if cfg.RestartWindow == 0 {
		cfg.RestartWindow = 10 * time.Second
	}
	onStopped := cfg.OnStopped
	cfg.OnStopped = nil
	supProps := actor.PropsFromProducer(NewSupervisorProducer(cfg), actor.WithReceiverMiddleware(supervisorMiddleware...), cfg.dispatch())
	return actor.PropsFromProducer(func() actor.Actor {
		return &keeper{props: supProps, onStopped: onStopped}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(cfg.MaxRestarts, cfg.RestartWindow, actor.DefaultDecider)), cfg.dispatch())
}

func (k *keeper) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		k.spawn(ctx)
	case *actor.Terminated:
		if !k.stopping {
			k.spawn(ctx)
		}
	case *actor.Stopping:
		k.stopping = true
	case *actor.Stopped:
		if k.onStopped != nil {
			k.onStopped()
		}
	}
}

func (k *keeper) spawn(ctx actor.Context) {
	if _, err := ctx.SpawnNamed(k.props, SupervisorName); err != nil {
		panic(err)
	}
}
