package loadbalancer

import (
	"errors"
	"fmt"
	"testing"
)

func TestValidationError(t *testing.T) {
	e := &ValidationError{Field: "backends[2].port", Value: "0", Reason: "port must be between 1 and 65535"}
	if got, want := e.Error(), `invalid backends[2].port "0": port must be between 1 and 65535`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&ValidationError{Value: "x"}).Error(); got != `invalid value "x"` {
		t.Errorf("empty Field and Reason: %q", got)
	}
	if !errors.Is(e, ErrInvalid) || errors.Is(e, ErrInvalidStateTransition) {
		t.Error("errors.Is without Err")
	}
	sentinel := errors.New("other")
	e2 := &ValidationError{Field: "state", Err: sentinel}
	if !errors.Is(e2, ErrInvalid) || !errors.Is(e2, sentinel) {
		t.Error("errors.Is with Err")
	}
	e3 := &ValidationError{Err: ErrInvalid}
	if !errors.Is(e3, ErrInvalid) {
		t.Error("errors.Is with Err = ErrInvalid")
	}
	wrapped := fmt.Errorf("upsert: %w", e2)
	var ve *ValidationError
	if !errors.As(wrapped, &ve) || ve != e2 || !errors.Is(wrapped, sentinel) {
		t.Error("errors.As through wrapping")
	}

	fields := []struct {
		field      string
		fe, backnd bool
	}{
		{"frontend", true, false},
		{"frontend.port", true, false},
		{"frontends", false, false},
		{"backends[0]", false, true},
		{"backends[12].address", false, true},
		{"type", false, false},
		{"", false, false},
	}
	for _, f := range fields {
		e := &ValidationError{Field: f.field}
		if e.IsFrontend() != f.fe || e.IsBackend() != f.backnd {
			t.Errorf("%q: IsFrontend %v IsBackend %v", f.field, e.IsFrontend(), e.IsBackend())
		}
	}
}
