// Package api is actorlb's REST shim: an HTTP server that forwards every
// call to the engine, the wire types, and a Go client for it.
//
// The /v1/service endpoints follow the upstream v1 service API
// (ServiceSpec, FrontendAddress, BackendAddress, Service, its status codes
// 460 and 461, errors as a JSON string); /v1/lb/revnat, /v1/lb/maps,
// /v1/healthz, /v1/openapi.json and /metrics are actorlb's. openapi.json,
// embedded and served at /v1/openapi.json, documents every path, field,
// status code and the decisions taken on upstream quirks.
//
// Lifecycle: NewServer then Serve on one or more listeners (a unix socket,
// a loopback TCP address); Shutdown stops accepting, lets requests in
// flight finish and turns healthz to 503. The server holds no state of its
// own besides metrics: the engine owns everything. A Client is stateless
// and safe for concurrent use; Close drops its idle connections.
//
// Error contract: the server validates a request completely before it
// calls the engine, so a refused request touches no map. Refusals name the
// JSON path of the field and the reason (*FieldError): 460 for the ID or
// frontend-address, 461 for backend-addresses, 400 for the rest of the body,
// 413 for a body over MaxBodyBytes. Engine failures are 500, a missing
// service 404. The client returns *StatusError for non-2xx answers, matched
// by errors.Is against ErrNotFound, ErrInvalid and ErrUnavailable, and
// errors wrapping ErrUnreachable when the agent cannot be reached.
package api
