package loadbalancer

import (
	"errors"
	"testing"
)

func TestParseBackendState(t *testing.T) {
	valid := []struct {
		in   string
		want BackendState
		str  string
	}{
		{"", BackendStateActive, "active"},
		{"active", BackendStateActive, "active"},
		{"ACTIVE", BackendStateActive, "active"},
		{"terminating", BackendStateTerminating, "terminating"},
		{"Quarantined", BackendStateQuarantined, "quarantined"},
		{"maintenance", BackendStateMaintenance, "maintenance"},
	}
	for _, tc := range valid {
		got, err := ParseBackendState(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBackendState(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("String() = %q, want %q", got.String(), tc.str)
		}
		if back, err := ParseBackendState(got.String()); err != nil || back != got {
			t.Errorf("round trip %q: %v, %v", got.String(), back, err)
		}
	}
	if BackendStateActive != 0 || BackendStateTerminating != 1 || BackendStateQuarantined != 2 || BackendStateMaintenance != 3 {
		t.Error("state values must equal the backend map flags byte")
	}
	for _, in := range []string{"draining", "0", " active", "terminated"} {
		_, err := ParseBackendState(in)
		wantValidationError(t, err, "state", "")
	}
	_, err := ParseBackendState("draining")
	wantValidationError(t, err, "state", `invalid state "draining": must be one of active, terminating, quarantined, maintenance`)
	if s := BackendState(4).String(); s != "BackendState(4)" {
		t.Errorf("unknown state String() = %q", s)
	}
	for s, want := range map[BackendState]bool{0: true, 1: false, 2: false, 3: false, 4: false} {
		if s.IsActive() != want {
			t.Errorf("%v.IsActive() = %v", s, !want)
		}
	}
}

func TestValidateStateTransition(t *testing.T) {
	const (
		A = BackendStateActive
		T = BackendStateTerminating
		Q = BackendStateQuarantined
		M = BackendStateMaintenance
	)
	cases := []struct {
		from, to BackendState
		ok       bool
		reason   string
	}{
		{A, A, true, ""},
		{A, T, true, ""},
		{A, Q, true, ""},
		{A, M, true, ""},
		{T, A, false, "cannot change from terminating to active (terminating is final)"},
		{T, T, true, ""},
		{T, Q, false, "cannot change from terminating to quarantined (terminating is final)"},
		{T, M, false, "cannot change from terminating to maintenance (terminating is final)"},
		{Q, A, true, ""},
		{Q, T, true, ""},
		{Q, Q, true, ""},
		{Q, M, false, "cannot change from quarantined to maintenance (quarantined can only become active or terminating)"},
		{M, A, true, ""},
		{M, T, false, "cannot change from maintenance to terminating (maintenance can only become active)"},
		{M, Q, false, "cannot change from maintenance to quarantined (maintenance can only become active)"},
		{M, M, true, ""},
	}
	if len(cases) != 16 {
		t.Fatal("want all 16 pairs")
	}
	for _, tc := range cases {
		err := ValidateStateTransition(tc.from, tc.to)
		if tc.ok {
			if err != nil {
				t.Errorf("%v -> %v: %v", tc.from, tc.to, err)
			}
			continue
		}
		ve := wantValidationError(t, err, "state", `invalid state "`+tc.to.String()+`": `+tc.reason)
		if ve.Reason != tc.reason {
			t.Errorf("Reason = %q, want %q", ve.Reason, tc.reason)
		}
		if !errors.Is(err, ErrInvalidStateTransition) {
			t.Errorf("%v -> %v: error does not match ErrInvalidStateTransition", tc.from, tc.to)
		}
	}
	for _, pair := range [][2]BackendState{{4, A}, {A, 4}, {9, 9}} {
		err := ValidateStateTransition(pair[0], pair[1])
		wantValidationError(t, err, "state", "")
		if errors.Is(err, ErrInvalidStateTransition) {
			t.Errorf("unknown state %v matches ErrInvalidStateTransition", pair)
		}
	}
}

func TestNewBackendWeight(t *testing.T) {
	for _, n := range []int64{0, 1, 100, 65535} {
		w, err := NewBackendWeight(n)
		if err != nil || int64(w) != n {
			t.Errorf("NewBackendWeight(%d) = %d, %v", n, w, err)
		}
	}
	for _, n := range []int64{-1, 65536, -1 << 63, 1<<63 - 1} {
		_, err := NewBackendWeight(n)
		wantValidationError(t, err, "weight", "")
	}
	_, err := NewBackendWeight(-1)
	wantValidationError(t, err, "weight", `invalid weight "-1": weight must be between 0 and 65535`)
	if DefaultBackendWeight != 100 || MaxBackendWeight != 65535 {
		t.Error("weight constants")
	}
}

func TestParseBackend(t *testing.T) {
	b, err := ParseBackend("10.0.1.5:8080/tcp")
	if err != nil {
		t.Fatal(err)
	}
	want := Backend{L3n4Addr: L3n4Addr{mustAddr("10.0.1.5"), 8080, TCP, ScopeExternal}, Weight: DefaultBackendWeight, State: BackendStateActive}
	if b != want {
		t.Fatalf("ParseBackend = %#v, want %#v", b, want)
	}
	if b.String() != "10.0.1.5:8080/TCP" {
		t.Errorf("String() = %q", b.String())
	}
	valid := map[string]string{
		"10.0.1.5:8080":           "10.0.1.5:8080/TCP",
		"[fd00::1:5]:8443/tcp":    "[fd00::1:5]:8443/TCP",
		"10.0.1.5:53/UDP":         "10.0.1.5:53/UDP",
		"[::ffff:10.0.1.5]:9/any": "10.0.1.5:9/ANY",
	}
	for in, str := range valid {
		b, err := ParseBackend(in)
		if err != nil {
			t.Errorf("ParseBackend(%q): %v", in, err)
			continue
		}
		if b.String() != str {
			t.Errorf("ParseBackend(%q).String() = %q, want %q", in, b.String(), str)
		}
		if back, err := ParseBackend(b.String()); err != nil || back != b {
			t.Errorf("round trip %q: %v, %v", b.String(), back, err)
		}
	}
	invalidCases := []struct{ in, msg string }{
		{"10.0.1.5:0/tcp", `invalid backend "10.0.1.5:0/tcp": port must be between 1 and 65535`},
		{"10.0.1.5:80/tcp/internal", `invalid backend "10.0.1.5:80/tcp/internal": too many '/' parts, want IP:PORT[/PROTOCOL]`},
		{"", `invalid backend "": address is empty`},
		{"10.0.1.5", ""},
		{"[fe80::1%eth0]:80", ""},
	}
	for _, tc := range invalidCases {
		_, err := ParseBackend(tc.in)
		wantValidationError(t, err, "backend", tc.msg)
	}
	// String drops a non-canonical scope so that it parses back.
	b.Scope = ScopeInternal
	if b.String() != "10.0.1.5:8080/TCP" {
		t.Errorf("String() with internal scope = %q", b.String())
	}
}
