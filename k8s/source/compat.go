package source

import (
	"errors"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// Until the façade's ownership commit (SPEC16) is merged, the types it adds
// are mirrored here with the same names and shapes; the merge replaces this
// file with aliases of actorlb's.

// SyncResult mirrors actorlb.SyncResult.
type SyncResult struct {
	Upserted, Deleted int
	Failed            []SyncFailure
}

// SyncFailure mirrors actorlb.SyncFailure.
type SyncFailure struct {
	Frontend lb.L3n4Addr
	Err      error
}

// ErrFrontendOwned mirrors actorlb.ErrFrontendOwned.
var ErrFrontendOwned = errors.New("frontend owned by another source")

// lbSource mirrors loadbalancer.Source.
type lbSource uint8

// sourceKubernetes mirrors loadbalancer.SourceKubernetes.
const sourceKubernetes lbSource = 1

// setSource marks s as the Kubernetes source's (Service.Source).
func setSource(*lb.Service) {}

// sameSource compares the sources of a and b.
func sameSource(a, b *lb.Service) bool { return true }
