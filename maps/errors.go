package maps

import (
	"errors"

	"github.com/actorlb/actorlb/internal/bpffs"
)

var (
	// ErrMapFull occurs when an update needs a new entry in a map that
	// already holds MaxEntries entries (the kernel's E2BIG). Entries written
	// before the full condition stay written.
	ErrMapFull = errors.New("map full")

	// ErrIncompatible occurs when a pinned map exists with another type, key
	// size, value size or max entries than asked for, and Recreate is off.
	ErrIncompatible = errors.New("pinned map incompatible")

	// ErrVanished occurs when Open finds a family's service or backend map
	// unpinned while the family's other maps still hold entries that refer
	// to it (the pin was removed, or the root is wrong), and Recreate is
	// off: opening would create it empty and the restore would drop the
	// family's services or backends.
	ErrVanished = errors.New("pinned map missing")

	// ErrFamily occurs when an address of one IP family is written to a map
	// of the other family.
	ErrFamily = errors.New("address family mismatch")

	// ErrNotMounted occurs when the pin root is not on a BPF filesystem and
	// none could be mounted.
	ErrNotMounted = bpffs.ErrNotMounted

	// ErrInjected is the default error of an injected fault.
	ErrInjected = errors.New("injected fault")
)
