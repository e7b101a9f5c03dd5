package conntrack

import "errors"

var (
	// ErrSize occurs when a key or value to decode has not the size of
	// its layout (16 or 40 bytes for a key, 48 or 72 for a forward entry,
	// 24 or 48 for a reverse entry).
	ErrSize = errors.New("wrong size")

	// ErrFamily occurs when the addresses of a key or an entry to encode
	// are not all of one IP family, or are not valid.
	ErrFamily = errors.New("address family mismatch")

	// ErrIncompatible occurs when a conntrack map is pinned with another
	// type, key size or value size than SPEC17's layouts.
	ErrIncompatible = errors.New("pinned conntrack map incompatible")

	// ErrInvalidConfig occurs when a Timeouts or Config field is out of
	// range; the error names the field.
	ErrInvalidConfig = errors.New("invalid conntrack config")
)
