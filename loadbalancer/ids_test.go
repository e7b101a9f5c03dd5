package loadbalancer

import "testing"

func TestNewServiceID(t *testing.T) {
	for _, n := range []uint64{1, 7, 65535} {
		id, err := NewServiceID(n)
		if err != nil || uint64(id) != n {
			t.Errorf("NewServiceID(%d) = %d, %v", n, id, err)
		}
	}
	for _, n := range []uint64{0, 65536, 1 << 32, 1<<64 - 1} {
		_, err := NewServiceID(n)
		wantValidationError(t, err, "id", "")
	}
	_, err := NewServiceID(65536)
	wantValidationError(t, err, "id", `invalid id "65536": service ID must be between 1 and 65535`)
	_, err = NewServiceID(0)
	wantValidationError(t, err, "id", `invalid id "0": service ID must be between 1 and 65535`)
}

func TestParseServiceID(t *testing.T) {
	valid := []struct {
		in   string
		want ServiceID
	}{
		{"1", 1}, {"7", 7}, {"65535", 65535}, {"007", 7},
	}
	for _, tc := range valid {
		got, err := ParseServiceID(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseServiceID(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if back, err := ParseServiceID(got.String()); err != nil || back != got {
			t.Errorf("round trip %q: %v, %v", got.String(), back, err)
		}
	}
	invalidCases := []struct{ in, msg string }{
		{"0", `invalid id "0": service ID must be between 1 and 65535`},
		{"65536", `invalid id "65536": service ID must be between 1 and 65535`},
		{"99999999999999999999999", `invalid id "99999999999999999999999": service ID must be between 1 and 65535`},
		{"", `invalid id "": not a decimal number`},
		{"abc", `invalid id "abc": not a decimal number`},
		{"-1", ""}, {"+1", ""}, {" 1", ""}, {"1 ", ""}, {"0x10", ""}, {"1e3", ""}, {"1_000", ""},
	}
	for _, tc := range invalidCases {
		got, err := ParseServiceID(tc.in)
		if got != 0 {
			t.Errorf("ParseServiceID(%q) = %d with error", tc.in, got)
		}
		wantValidationError(t, err, "id", tc.msg)
	}
}

func TestBackendID(t *testing.T) {
	for _, n := range []uint64{1, 258, MaxBackendID} {
		id, err := NewBackendID(n)
		if err != nil || uint64(id) != n {
			t.Errorf("NewBackendID(%d) = %d, %v", n, id, err)
		}
		back, err := ParseBackendID(id.String())
		if err != nil || back != id {
			t.Errorf("ParseBackendID(%q) = %d, %v", id.String(), back, err)
		}
	}
	_, err := NewBackendID(0)
	wantValidationError(t, err, "backend-id", `invalid backend-id "0": backend ID must be between 1 and 4294967295`)
	_, err = NewBackendID(MaxBackendID + 1)
	wantValidationError(t, err, "backend-id", "")
	for _, in := range []string{"", "0", "4294967296", "x", "-1"} {
		_, err := ParseBackendID(in)
		wantValidationError(t, err, "backend-id", "")
	}
}
