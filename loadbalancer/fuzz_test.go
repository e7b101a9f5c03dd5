package loadbalancer

import (
	"errors"
	"testing"
)

// checkFuzzError asserts the error contract: a *ValidationError matching
// ErrInvalid with a non-empty message.
func checkFuzzError(t *testing.T, in string, err error) {
	t.Helper()
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("%q: error %v is %T, want *ValidationError", in, err, err)
	}
	if !errors.Is(err, ErrInvalid) || ve.Error() == "" || ve.Field == "" {
		t.Fatalf("%q: bad error %#v", in, ve)
	}
}

func FuzzParseL3n4Addr(f *testing.F) {
	for _, s := range []string{
		"10.96.0.10:53/udp", "[fd00::a]:443/tcp", "10.0.1.5:8080", "10.96.0.10:53/udp/internal",
		"[::ffff:10.0.0.1]:80/any", "0.0.0.0:30000/sctp/external", "[::]:1", "fe80::1%eth0", "[fe80::1%eth0]:80",
		"10.0.1.5:0", "10.0.1.5:65536", "10.0.1.5:", "[fd00::a]", "fd00::a:80", "", "/", ":", "[]:",
		"10.0.1.5:80/tcp/internal/x", "[1.2.3.4]:80", "1.2.3.4:080",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseL3n4Addr(s)
		if err != nil {
			checkFuzzError(t, s, err)
			return
		}
		if err := a.Validate("address"); err != nil {
			t.Fatalf("%q parsed to %#v, which does not validate: %v", s, a, err)
		}
		str := a.String()
		b, err := ParseL3n4Addr(str)
		if err != nil {
			t.Fatalf("%q -> %q does not parse: %v", s, str, err)
		}
		if a != b {
			t.Fatalf("%q -> %#v -> %q -> %#v", s, a, str, b)
		}
		if b.String() != str {
			t.Fatalf("String not canonical: %q vs %q", str, b.String())
		}
	})
}

func FuzzParseBackend(f *testing.F) {
	for _, s := range []string{
		"10.0.1.5:8080/tcp", "[fd00::1:5]:8443", "10.0.1.5:53/UDP", "10.0.1.5:80/tcp/internal",
		"[::ffff:10.0.1.5]:9/any", "", "10.0.1.5", "[fe80::1%lo]:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBackend(s)
		if err != nil {
			checkFuzzError(t, s, err)
			return
		}
		if b.Weight != DefaultBackendWeight || b.State != BackendStateActive || b.Scope != ScopeExternal {
			t.Fatalf("%q: %#v", s, b)
		}
		c, err := ParseBackend(b.String())
		if err != nil || c != b {
			t.Fatalf("%q -> %q -> %#v, %v", s, b.String(), c, err)
		}
		// A frontend on the backend's address, another port (a backend equal
		// to its frontend is refused).
		port := uint16(1)
		if b.Port == 1 {
			port = 2
		}
		svc := &Service{Frontend: Frontend{L3n4Addr: L3n4Addr{Addr: b.Addr, Port: port, Protocol: b.Protocol}}, Backends: []Backend{b}}
		if err := svc.Validate(); err != nil && !b.Addr.IsUnspecified() && b.Addr != ipv4Broadcast {
			t.Fatalf("%q: service with it does not validate: %v", s, err)
		}
	})
}

func FuzzParseServiceID(f *testing.F) {
	for _, s := range []string{"1", "7", "65535", "65536", "0", "", "-1", "+1", "007", "99999999999999999999", "1e3", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseServiceID(s)
		if err != nil {
			checkFuzzError(t, s, err)
			if id != 0 {
				t.Fatalf("%q: id %d with error", s, id)
			}
			return
		}
		if id == 0 {
			t.Fatalf("%q parsed to 0", s)
		}
		back, err := ParseServiceID(id.String())
		if err != nil || back != id {
			t.Fatalf("%q -> %q -> %d, %v", s, id.String(), back, err)
		}
	})
}

func FuzzParseBackendState(f *testing.F) {
	for _, s := range []string{"", "active", "TERMINATING", "quarantined", "Maintenance", "draining", "3", "active "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseBackendState(s)
		if err != nil {
			checkFuzzError(t, s, err)
			return
		}
		if !st.IsValid() {
			t.Fatalf("%q parsed to unknown state %d", s, st)
		}
		back, err := ParseBackendState(st.String())
		if err != nil || back != st {
			t.Fatalf("%q -> %q -> %v, %v", s, st.String(), back, err)
		}
	})
}

func FuzzParseL4Type(f *testing.F) {
	for _, s := range []string{"tcp", "UDP", "Sctp", "any", "", "icmp", "6", "tcp\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseL4Type(s)
		if err != nil {
			checkFuzzError(t, s, err)
			return
		}
		if !p.IsValid() {
			t.Fatalf("%q parsed to unknown protocol %d", s, p)
		}
		back, err := ParseL4Type(p.String())
		if err != nil || back != p {
			t.Fatalf("%q -> %q -> %v, %v", s, p.String(), back, err)
		}
	})
}
