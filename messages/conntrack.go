package messages

import "github.com/actorlb/actorlb/internal/conntrack"

// Messages of the conntrack GC actor (actors/conntrack.go), which owns the
// scanner of the datapath's conntrack maps. Its timer sends it a tick of
// its own; these come from the edge.

// ConntrackTick asks for one bounded tick now, besides the timer's.
type ConntrackTick struct {
	Reply chan<- ConntrackTickReply // buffered (capacity 1); may be nil
}

// ConntrackTickReply answers ConntrackTick: what the tick did and the
// first error it met (the tick went on with the other maps).
type ConntrackTickReply struct {
	Report conntrack.TickReport
	Err    error
}

// ConntrackStats asks for the scanner's figures.
type ConntrackStats struct {
	Reply chan<- conntrack.Stats // buffered (capacity 1)
}
