package actors

import "github.com/actorlb/actorlb/internal/engine"

// The engine's sentinels (internal/engine says when each occurs).
var (
	ErrServiceNotFound  = engine.ErrServiceNotFound
	ErrServiceIDInUse   = engine.ErrServiceIDInUse
	ErrFrontendInUse    = engine.ErrFrontendInUse
	ErrIDSpaceExhausted = engine.ErrIDSpaceExhausted
	ErrRevNATNotFound   = engine.ErrRevNATNotFound
	ErrRevNATOwned      = engine.ErrRevNATOwned
	ErrEngineRestarted  = engine.ErrEngineRestarted
)
