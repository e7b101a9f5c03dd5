// Package netns runs code inside a network namespace: Do locks a thread,
// enters the namespace at a path (/run/netns/NAME, /proc/PID/ns/net), runs
// the function there and comes back. Sockets the function creates stay in
// that namespace; so do the devices it names.
//
// Lifecycle: stateless; each call uses a new locked thread for its span.
//
// Error contract: errors name the namespace path ("netns /run/netns/x:
// ..."); the function's own error is returned as it is. A thread that
// cannot return to its namespace is left locked, so that it exits with its
// goroutine rather than serve other goroutines in the wrong namespace.
package netns
