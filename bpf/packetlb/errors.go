package packetlb

import "errors"

var (
	// ErrMapsNotPinned: the engine's LB maps are not pinned under the
	// root (start the agent, which creates them, first).
	ErrMapsNotPinned = errors.New("lb maps not pinned")
	// ErrIncompatible: a pinned map has another shape than the programs
	// expect (an older or newer actorlb), or Maglev tables of another size.
	ErrIncompatible = errors.New("pinned map incompatible")
	// ErrInvalidConfig: a Config field is invalid (the message names it).
	ErrInvalidConfig = errors.New("invalid datapath config")
	// ErrNoDevice: a device named in Config.Devices does not exist in the
	// caller's network namespace.
	ErrNoDevice = errors.New("no such device")
	// ErrXDPNotSupported: the device takes no XDP program in the mode asked
	// (use --datapath-mode generic or tc).
	ErrXDPNotSupported = errors.New("xdp attach failed")
	// ErrTCXNotSupported: the kernel has no tcx links (Linux 6.6 or later
	// is needed for the tc program).
	ErrTCXNotSupported = errors.New("tc (tcx) attach failed")
)

// ErrNotAttached: the packet LB's own maps are not pinned under the root
// (it was never attached there, or was detached).
var ErrNotAttached = errors.New("packet lb not attached")
