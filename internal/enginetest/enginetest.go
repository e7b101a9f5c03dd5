package enginetest

import (
	"fmt"
	"time"

	"github.com/actorlb/actorlb/maps"
	"github.com/asynkron/protoactor-go/actor"
)

// Hooks are the test knobs of one engine. The zero value changes nothing.
type Hooks struct {
	// Fault, if set, is consulted before every map call (see
	// maps.FaultFunc).
	Fault maps.FaultFunc
	// ChildMiddleware is added to every child of the supervisor and
	// SupervisorMiddleware to the supervisor (failure injection).
	ChildMiddleware      []actor.ReceiverMiddleware
	SupervisorMiddleware []actor.ReceiverMiddleware
	// NoIDLease makes every new service and backend ask the allocator
	// for its IDs (the supervisor keeps no lease of free IDs): tests of
	// that path.
	NoIDLease bool
	// Maps, if set, is called with the engine's maps once they are open,
	// before New returns, for tests that read them while the engine runs
	// (a datapath-like reader, lookups, counters). Never write them: their
	// owners' copies would no longer match.
	Maps func(*maps.LBMaps)
	// QuietAfter, if set, replaces the supervisor's default rest (1 s)
	// before it tells its core Quiet (actors.Config.QuietAfter).
	QuietAfter time.Duration
}

// field returns where the hooks of cfg (a pointer to an actorlb.Config)
// are kept, or nil for anything else. Installed by actorlb.
var field func(cfg any) *Hooks

// Install is called by package actorlb, once, when it is initialised: f
// returns the hooks field of the *actorlb.Config it is given, nil for any
// other value.
func Install(f func(cfg any) *Hooks) { field = f }

// With returns cfg, an actorlb.Config, with its hooks set to h.
func With[C any](cfg C, h Hooks) C {
	if field == nil {
		panic("enginetest: with hooks: actorlb is not linked (nothing installed the hooks' setter)")
	}
	p := field(&cfg)
	if p == nil {
		panic(fmt.Sprintf("enginetest: with hooks: %T is not an actorlb.Config", cfg))
	}
	*p = h
	return cfg
}
