package loadbalancer

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every error that a parser or validator
// of this package returns: a malformed string, a value out of range, an
// inconsistent Service, a forbidden backend state change.
var ErrInvalid = errors.New("invalid value")

// ErrInvalidStateTransition is matched, besides ErrInvalid, by the error of
// ValidateStateTransition when a backend may not move from one state to
// another (for example out of terminating, which is final).
var ErrInvalidStateTransition = errors.New("invalid backend state transition")

// ValidationError describes one invalid input. Every error returned by a
// parser or validator of this package is a *ValidationError, and
// errors.Is(err, ErrInvalid) holds for all of them.
type ValidationError struct {
	// Field names the input: "frontend.port", "backends[2].address", "id",
	// "weight", ... Parsers of a whole address use "address" or "backend".
	Field string
	// Value is the offending input as text.
	Value string
	// Reason says what is wrong, in lower case.
	Reason string
	// Err is an optional sentinel (such as ErrInvalidStateTransition) that
	// errors.Is matches besides ErrInvalid.
	Err error
}

// Error formats the error as `invalid FIELD "VALUE": REASON`.
func (e *ValidationError) Error() string {
	field := e.Field
	if field == "" {
		field = "value"
	}
	if e.Reason == "" {
		return fmt.Sprintf("invalid %s %q", field, e.Value)
	}
	return fmt.Sprintf("invalid %s %q: %s", field, e.Value, e.Reason)
}

// Unwrap makes errors.Is(e, ErrInvalid) always true and errors.Is(e, e.Err)
// true when Err is set.
func (e *ValidationError) Unwrap() error {
	if e.Err == nil || e.Err == ErrInvalid {
		return ErrInvalid
	}
	return errors.Join(ErrInvalid, e.Err)
}

// IsFrontend reports whether the error is about the frontend of a service
// (Field "frontend" or "frontend.*").
func (e *ValidationError) IsFrontend() bool {
	return e.Field == "frontend" || strings.HasPrefix(e.Field, "frontend.")
}

// IsBackend reports whether the error is about a backend of a service
// (Field starting with "backends").
func (e *ValidationError) IsBackend() bool {
	return strings.HasPrefix(e.Field, "backends")
}

func invalid(field, value, reason string) *ValidationError {
	return &ValidationError{Field: field, Value: value, Reason: reason}
}
