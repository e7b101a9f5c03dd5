package maglev

import "errors"

var (
	// ErrInvalidTableSize is returned when the table size is not a prime
	// in [MinTableSize, MaxTableSize].
	ErrInvalidTableSize = errors.New("invalid maglev table size")
	// ErrInvalidBackend is returned when a backend cannot be placed: an
	// invalid address, or the same address twice.
	ErrInvalidBackend = errors.New("invalid maglev backend")
)
