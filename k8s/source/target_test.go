package source

import "github.com/actorlb/actorlb"

// The façade is a Target.
var _ Target = (*actorlb.Engine)(nil)
