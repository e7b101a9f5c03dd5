// Package enginetest holds the engine's test knobs: map faults, actor
// middleware that crashes or delays actors, and a look at the engine's
// maps while it runs. They are not part of actorlb's API: actorlb.Config
// carries them in an unexported field, which tests in package actorlb set
// directly and tests elsewhere in the module set with With.
//
// It does not import actorlb (actorlb imports it); actorlb installs the
// setter With uses when it is initialised (Install), so With works in any
// program that links actorlb.
//
// Lifecycle: Hooks are read once, by actorlb.New.
//
// Error contract: With panics when it is given anything but an
// actorlb.Config, or when actorlb is not linked: both are mistakes in a
// test's code, not in its input.
package enginetest
