package idalloc

import (
	"errors"
	"fmt"
)

var (
	// ErrIDSpaceExhausted is returned by Acquire when every ID in [1, max] is
	// bound, reserved or held.
	ErrIDSpaceExhausted = errors.New("id space exhausted")

	// ErrIDOutOfRange is returned by AcquireID, Restore and Hold for id 0 or
	// an id greater than the allocator's max.
	ErrIDOutOfRange = errors.New("id out of range")

	// ErrIDInUse is matched by *ConflictError: the requested ID is bound or
	// reserved for another key (AcquireID, Restore), it is bound or reserved
	// at all (Hold), or a reservation to drop has been claimed
	// (DropReservation).
	ErrIDInUse = errors.New("id in use")

	// ErrKeyBound is matched by *KeyBoundError: the key already owns a
	// different ID (AcquireID, Restore).
	ErrKeyBound = errors.New("key bound to another id")

	// ErrIDHeld is returned by AcquireID and Restore when the requested ID is
	// held (see Allocator.Hold).
	ErrIDHeld = errors.New("id held")

	// ErrNotLeased is returned by Claim for an ID that is neither held (a
	// lease's) nor already the key's.
	ErrNotLeased = errors.New("id not leased")

	// ErrNotFound is returned by Release for a key without a claimed binding
	// (unknown, or only an unclaimed reservation) and by DropReservation for
	// an unknown key.
	ErrNotFound = errors.New("not found")

	// ErrRefCountOverflow is returned by Acquire and AcquireID when the key's
	// reference count is already at its maximum (2^32-1).
	ErrRefCountOverflow = errors.New("reference count overflow")
)

// ConflictError reports that an ID belongs to a key other than the one the
// caller asked for (or, for Hold and DropReservation, that it is in use).
// errors.Is(err, ErrIDInUse) is true.
type ConflictError struct {
	ID       uint64 // the requested ID
	Key      any    // the key that owns ID
	Reserved bool   // Key owns ID only by a restored, unclaimed reservation
}

func (e *ConflictError) Error() string {
	if e.Reserved {
		return fmt.Sprintf("id %d is reserved for %v", e.ID, e.Key)
	}
	return fmt.Sprintf("id %d is bound to %v", e.ID, e.Key)
}

// Is reports whether target is ErrIDInUse.
func (e *ConflictError) Is(target error) bool { return target == ErrIDInUse }

// KeyBoundError reports that a key already owns an ID other than the
// requested one. errors.Is(err, ErrKeyBound) is true.
type KeyBoundError struct {
	Key      any    // the key of the request
	ID       uint64 // the ID that Key already owns
	Reserved bool   // Key owns ID only by a restored, unclaimed reservation
}

func (e *KeyBoundError) Error() string {
	if e.Reserved {
		return fmt.Sprintf("key %v already has id %d reserved", e.Key, e.ID)
	}
	return fmt.Sprintf("key %v is already bound to id %d", e.Key, e.ID)
}

// Is reports whether target is ErrKeyBound.
func (e *KeyBoundError) Is(target error) bool { return target == ErrKeyBound }
