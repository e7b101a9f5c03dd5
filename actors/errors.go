package actors

import "errors"

// errNotLeased: a request to the allocator names as leased an ID the
// supervisor's lease does not have.
var errNotLeased = errors.New("not leased")
