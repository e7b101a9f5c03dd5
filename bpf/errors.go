package bpf

import (
	"errors"

	"github.com/actorlb/actorlb/maps"
)

var (
	// ErrMapsNotPinned occurs when Attach finds no pinned service, backend
	// or revNAT map under the bpffs root: the engine (actorlb agent) creates
	// them, and the programs only ever use those.
	ErrMapsNotPinned = errors.New("lb maps not pinned")

	// ErrIncompatible occurs when a pinned map has another type, key size,
	// value size or flags than the programs read (maps.ErrIncompatible).
	ErrIncompatible = maps.ErrIncompatible

	// ErrNoCgroup2 occurs when no cgroup v2 hierarchy is mounted.
	ErrNoCgroup2 = errors.New("cgroup2 not mounted")

	// ErrNotCgroup2 occurs when the cgroup path to attach to is not a
	// directory on a cgroup v2 filesystem.
	ErrNotCgroup2 = errors.New("not a cgroup2 directory")

	// ErrLinkNotSupported occurs on kernels without BPF links for cgroup
	// programs (before 5.7): the programs could not survive the agent.
	ErrLinkNotSupported = errors.New("cgroup bpf links not supported by the kernel")

	// ErrSockDestroyNotSupported occurs when TerminateUDPSockets runs on a
	// kernel without the bpf_sock_destroy kfunc or the BPF UDP socket iterator
	// (both needed: Linux 6.5 or later). Connected UDP sockets then keep their
	// backend until the application reconnects.
	ErrSockDestroyNotSupported = errors.New("udp socket termination not supported by the kernel (needs the bpf_sock_destroy kfunc and the udp socket iterator: Linux 6.5 or later)")
)
