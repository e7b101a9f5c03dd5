// Package bpffs finds, checks and (as root) mounts the BPF filesystem that
// actorlb pins its maps in.
//
// Lifecycle: stateless; every call looks at the running system afresh.
//
// Error contract: Ensure returns nil when the directory is on a BPF
// filesystem (creating the directory if needed), or an error wrapping
// ErrNotMounted whose text says what the user can do about it; a missing
// directory whose nearest existing parent is not on a BPF filesystem is
// refused before anything is created.
package bpffs
