package loadbalancer

import (
	"errors"
	"net/netip"
	"testing"
)

// wantValidationError fails unless err is a *ValidationError for field
// (when field != "") with message msg (when msg != "") matching ErrInvalid.
func wantValidationError(t *testing.T, err error, field, msg string) *ValidationError {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one for field %q", field)
	}
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("error %v is %T, want *ValidationError", err, err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	if field != "" && ve.Field != field {
		t.Errorf("error %q: Field = %q, want %q", err, ve.Field, field)
	}
	if msg != "" && err.Error() != msg {
		t.Errorf("error message:\n got %q\nwant %q", err.Error(), msg)
	}
	return ve
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
