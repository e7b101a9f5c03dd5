package idalloc_test

import (
	"errors"
	"fmt"

	"github.com/actorlb/actorlb/internal/idalloc"
)

// The lifecycle of service IDs across a restart: restore what the pinned maps
// hold, let the first full sync claim what is still wanted, then prune the
// rest, holding each stale ID until its map entries are gone.
func Example() {
	ids := idalloc.New[string, uint16](65535)

	// Read back from the pinned service maps.
	_ = ids.Restore("10.96.0.10:80/TCP", 7)
	_ = ids.Restore("10.96.0.11:53/UDP", 8)

	// First full sync: only the first frontend is still wanted; a new one
	// never gets a reserved ID.
	id, created, _ := ids.Acquire("10.96.0.10:80/TCP")
	fmt.Println("claimed", id, created)
	id, created, _ = ids.Acquire("10.96.0.12:443/TCP")
	fmt.Println("fresh", id, created)

	// Prune stale reservations.
	for _, b := range ids.Unclaimed() {
		_ = ids.DropReservation(b.Key)
		_ = ids.Hold(b.ID) // while the stale map entries are deleted
		fmt.Println("stale", b.ID, b.Key)
		_, err := ids.AcquireID("10.96.0.13:80/TCP", b.ID)
		fmt.Println("  reuse:", errors.Is(err, idalloc.ErrIDHeld))
		ids.Unhold(b.ID) // entries deleted
	}

	_, err := ids.AcquireID("10.96.0.14:80/TCP", 7)
	var conflict *idalloc.ConflictError
	if errors.As(err, &conflict) {
		fmt.Printf("service ID %d is already registered to %v\n", conflict.ID, conflict.Key)
	}
	// Output:
	// claimed 7 false
	// fresh 1 true
	// stale 8 10.96.0.11:53/UDP
	//   reuse: true
	// service ID 7 is already registered to 10.96.0.10:80/TCP
}
