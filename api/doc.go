// Package api is actorlb's REST shim: an HTTP server that forwards every
// call to the engine, and a Go client for it.
//
// Lifecycle: the server lives as long as the agent; the client is stateless.
//
// Error contract: errors are JSON strings with the status codes of the
// upstream v1 service API.
package api
