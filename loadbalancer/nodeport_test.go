package loadbalancer

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParsePortRangeAcceptsMinDashMax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PortRange
	}{
		{"30000-32767", DefaultNodePortRange},
		{"1-65535", PortRange{1, 65535}},
		{"8080", PortRange{8080, 8080}},
		{"80-80", PortRange{80, 80}},
	} {
		got, err := ParsePortRange(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParsePortRange(got.String()); err != nil || back != got {
			t.Errorf("ParsePortRange(%q.String()) = %v, %v; want %v", tc.in, back, err, got)
		}
	}
}

func TestParsePortRangeRefusesMalformedRangesNamingTheField(t *testing.T) {
	for _, tc := range []struct{ in, reason string }{
		{"", "range is empty"},
		{"-", "missing the first port"},
		{"-32767", "missing the first port"},
		{"30000-", "missing the last port"},
		{"0-100", "between 1 and 65535"},
		{"1-65536", "between 1 and 65535"},
		{"32767-30000", "above the last"},
		{"30000-32767-1", "not a decimal number"},
		{" 30000-32767", "not a decimal number"},
		{"+1-2", "not a decimal number"},
		{"a-b", "not a decimal number"},
	} {
		_, err := ParsePortRange(tc.in)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "node-port-range" || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePortRange(%q) error = %v; want a *ValidationError for node-port-range", tc.in, err)
			continue
		}
		if !strings.Contains(ve.Reason, tc.reason) {
			t.Errorf("ParsePortRange(%q) reason %q does not say %q", tc.in, ve.Reason, tc.reason)
		}
	}
}

func TestValidateNodePortChecksBothEndsOfTheRange(t *testing.T) {
	r := DefaultNodePortRange
	for _, p := range []uint16{30000, 30080, 32767} {
		if err := ValidateNodePort(p, r); err != nil {
			t.Errorf("ValidateNodePort(%d) = %v, want nil", p, err)
		}
	}
	for _, p := range []uint16{0, 80, 29999, 32768, 65535} {
		err := ValidateNodePort(p, r)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "node-port" || !strings.Contains(ve.Reason, "30000-32767") {
			t.Errorf("ValidateNodePort(%d) = %v; want a node-port error naming 30000-32767", p, err)
		}
	}
}

func TestNodePortFrontendsAreTheSurrogateThenEachNodeAddressOfTheFamily(t *testing.T) {
	addrs := []netip.Addr{
		netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("fd00::10"), netip.MustParseAddr("127.0.0.1"),
		netip.MustParseAddr("::ffff:192.168.1.11"), netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("::1"), {},
	}
	fe := L3n4Addr{Addr: netip.MustParseAddr("192.168.1.10"), Port: 30080, Protocol: UDP}
	got := NodePortFrontends(fe, addrs)
	want := []string{"0.0.0.0:30080/UDP", "192.168.1.10:30080/UDP", "127.0.0.1:30080/UDP", "192.168.1.11:30080/UDP"}
	if len(got) != len(want) {
		t.Fatalf("NodePortFrontends = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("frontend %d = %s, want %s", i, got[i], want[i])
		}
	}
	fe6 := L3n4Addr{Addr: netip.IPv6Unspecified(), Port: 30443, Protocol: TCP, Scope: ScopeInternal}
	got6 := NodePortFrontends(fe6, addrs)
	want6 := []string{"[::]:30443/TCP/internal", "[fd00::10]:30443/TCP/internal", "[::1]:30443/TCP/internal"}
	if len(got6) != len(want6) {
		t.Fatalf("NodePortFrontends(v6) = %v, want %v", got6, want6)
	}
	for i := range want6 {
		if got6[i].String() != want6[i] {
			t.Errorf("v6 frontend %d = %s, want %s", i, got6[i], want6[i])
		}
	}
	if only := NodePortFrontends(fe, nil); len(only) != 1 || !only[0].IsSurrogate() {
		t.Errorf("NodePortFrontends without node addresses = %v, want the surrogate alone", only)
	}
}

func FuzzParsePortRange(f *testing.F) {
	for _, s := range []string{"30000-32767", "1-65535", "80", "", "-", "0-1", "2-1", "65536", "1--2", "١-٢", "30000-32767\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParsePortRange(s)
		if err != nil {
			checkFuzzError(t, s, err)
			return
		}
		if r.Min == 0 || r.Min > r.Max {
			t.Fatalf("%q parsed to invalid range %v", s, r)
		}
		if back, err := ParsePortRange(r.String()); err != nil || back != r {
			t.Fatalf("%q: %v does not round-trip: %v, %v", s, r, back, err)
		}
		if !r.Contains(r.Min) || !r.Contains(r.Max) || ValidateNodePort(r.Min, r) != nil {
			t.Fatalf("%q: %v does not contain its ends", s, r)
		}
	})
}
