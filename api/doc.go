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
// a loopback TCP address); Shutdown stops accepting, closes idle
// connections and those that sent nothing yet, lets requests in flight
// finish and turns healthz to 503.
//
// Limits and guards: each listener holds at most Config.MaxConns
// connections; at most Config.MaxHeavyRequests large requests (bodies,
// lists, map dumps) run at once, the next waits HeavyWait then gets 429
// with Retry-After; a batch holds at most Config.MaxBatchSpecs specs (413);
// lists and dumps are streamed. On a TCP listener every request needs the
// bearer token (401) and a Host naming localhost, a loopback address or
// the listen address (403); the unix socket needs neither.
//
// The server holds no state of its own besides metrics: the engine owns
// everything. A Client is stateless
// and safe for concurrent use; Close drops its idle connections.
//
// Error contract: the server validates a request completely before it
// calls the engine, so a refused request touches no map. Refusals name the
// JSON path of the field and the reason (*FieldError): 460 for the ID or
// frontend-address, 461 for backend-addresses, 400 for the rest of the body,
// 413 for a body over MaxBodyBytes or a batch over MaxBatchSpecs. Engine
// failures are 500, a missing service 404 (also a GET or DELETE of an ID
// outside 1..65535). Requests net/http cannot read get its status with the
// same JSON string body. The client returns *StatusError for non-2xx
// answers, matched by errors.Is against ErrNotFound, ErrInvalid,
// ErrUnavailable and ErrUnauthorized (it retries 429 itself), and errors
// wrapping ErrUnreachable when the agent cannot be reached.
package api
