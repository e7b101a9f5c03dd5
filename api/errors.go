package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Status codes of the upstream v1 service API beside the standard ones.
const (
	// StatusInvalidFrontend answers a PUT whose ID or frontend-address is
	// invalid, or whose frontend or ID is taken by another service.
	StatusInvalidFrontend = 460
	// StatusInvalidBackend answers a PUT with an invalid backend-addresses
	// entry or a forbidden backend state change.
	StatusInvalidBackend = 461
)

var (
	// ErrNotFound occurs when the agent answers 404: no service with that
	// ID, or no such path.
	ErrNotFound = errors.New("not found")

	// ErrInvalid occurs when the agent refuses a request as invalid (400,
	// 413, 460, 461): the request changed nothing.
	ErrInvalid = errors.New("invalid request")

	// ErrUnavailable occurs when the agent answers 503: it is not ready or
	// shutting down.
	ErrUnavailable = errors.New("agent unavailable")

	// ErrUnauthorized occurs when the agent answers 401 or 403: a request
	// on its TCP listener without the right token or for a foreign Host.
	ErrUnauthorized = errors.New("unauthorized")

	// ErrUnreachable occurs when the client cannot reach the agent at all:
	// no socket, nothing listening, or no answer in time.
	ErrUnreachable = errors.New("agent unreachable")
)

// StatusError is a non-2xx answer of the agent. errors.Is matches it
// against ErrNotFound, ErrInvalid, ErrUnavailable and ErrUnauthorized by
// its code.
type StatusError struct {
	Code int
	// Message is the agent's error message (the JSON string of the body).
	Message string
}

// Error returns the agent's message.
func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("agent answered %d %s", e.Code, http.StatusText(e.Code))
	}
	return e.Message
}

// Is reports whether target is the sentinel for e's code.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == http.StatusNotFound
	case ErrInvalid:
		return isInvalidCode(e.Code)
	case ErrUnavailable:
		return e.Code == http.StatusServiceUnavailable
	case ErrUnauthorized:
		return e.Code == http.StatusUnauthorized || e.Code == http.StatusForbidden
	}
	return false
}

func isInvalidCode(code int) bool {
	switch code {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, StatusInvalidFrontend, StatusInvalidBackend:
		return true
	}
	return false
}

var (
	// ErrNoToken occurs when a request on a TCP listener carries no bearer
	// token (401), and when a TCP listener is served without a token and
	// without Config.Insecure.
	ErrNoToken = errors.New("API token required on TCP (Authorization: Bearer TOKEN; see --api-token-file)")

	// errWrongToken answers a request whose bearer token is not the
	// agent's (401).
	errWrongToken = errors.New("wrong API token")
)
