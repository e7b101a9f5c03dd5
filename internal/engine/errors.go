package engine

import (
	"errors"
	"fmt"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

var (
	// ErrServiceNotFound occurs when Get, Delete or DeleteByFrontend names a
	// service that does not exist.
	ErrServiceNotFound = errors.New("service not found")

	// ErrCallWithdrawn answers an Upsert its caller withdrew (it stopped
	// waiting: its context ended) before the engine took it: nothing of it
	// was done. No one reads the answer; it says what happened in logs
	// and tests.
	ErrCallWithdrawn = errors.New("call withdrawn before the engine took it")

	// ErrServiceIDInUse occurs when an upsert asks for a service ID that is
	// bound to another frontend.
	ErrServiceIDInUse = errors.New("service ID in use")

	// ErrFrontendInUse occurs when an upsert asks for a service ID while its
	// frontend is already registered with another ID.
	ErrFrontendInUse = errors.New("frontend in use")

	// ErrFrontendOwned occurs when an upsert, delete or sync of one source
	// (lb.Source: the API, Kubernetes) names a frontend whose service
	// belongs to another: each source changes only its own services.
	ErrFrontendOwned = errors.New("frontend owned by another source")

	// ErrIDSpaceExhausted occurs when every service ID (1..65535) or backend
	// ID is taken.
	ErrIDSpaceExhausted = errors.New("id space exhausted")

	// ErrRevNATNotFound occurs when RevNATGet or RevNATDelete names an ID
	// without a revNAT entry.
	ErrRevNATNotFound = errors.New("revnat entry not found")

	// ErrRevNATOwned occurs when RevNATAdd or RevNATDelete targets the
	// revNAT entry of a service: it is created and removed with its service.
	ErrRevNATOwned = errors.New("revnat entry belongs to a service")

	// ErrEngineRestarted answers the calls in flight when the supervisor
	// restarts or stops; the library API sends them again once the new
	// incarnation has restored.
	ErrEngineRestarted = errors.New("engine restarted while the operation was in flight")

	errInvalidSync = errors.New("invalid sync")
)

// ownedError is ErrFrontendOwned for a write of source as to svc, with
// what the user can do.
func ownedError(svc *table.Service, as lb.Source) error {
	how := "change or delete it there"
	if svc.Spec.Source == lb.SourceKubernetes {
		how = "change or delete the Kubernetes Service instead"
	}
	return fmt.Errorf("%w: %s is service %d, owned by %s, not %s: %s",
		ErrFrontendOwned, svc.Frontend(), svc.ID(), svc.Spec.Source, as, how)
}
