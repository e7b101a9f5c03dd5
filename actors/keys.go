package actors

import (
	"math"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/idalloc"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// Keys of the allocator and the supervisor's indexes. Most services and
// backends are IPv4: their keys are kept packed in 8 bytes
// (internal/packedmap), the others whole.

// newBackendIDs returns the backend ID allocator, with room for n
// backends: IPv4 backends' keys are kept packed in 8 bytes.
func newBackendIDs(n int) *idalloc.Allocator[addrkey.Backend, lb.BackendID] {
	return idalloc.NewCompact[addrkey.Backend, lb.BackendID](math.MaxUint32, n, addrkey.BackendPacker{})
}

// newServiceIDs returns the service ID allocator, with room for n
// frontends: IPv4 frontends are kept packed.
func newServiceIDs(n int) *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID] {
	return idalloc.NewCompact[lb.L3n4Addr, lb.ServiceID](lb.MaxServiceID, n, addrkey.FrontendPacker{})
}
