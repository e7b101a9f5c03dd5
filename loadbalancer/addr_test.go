package loadbalancer

import (
	"net/netip"
	"slices"
	"testing"
)

func TestParseL3n4Addr(t *testing.T) {
	valid := []struct {
		in   string
		want L3n4Addr
		str  string
	}{
		{"10.96.0.10:53/udp", L3n4Addr{mustAddr("10.96.0.10"), 53, UDP, ScopeExternal}, "10.96.0.10:53/UDP"},
		{"10.96.0.10:53/UDP", L3n4Addr{mustAddr("10.96.0.10"), 53, UDP, ScopeExternal}, "10.96.0.10:53/UDP"},
		{"[fd00::a]:443/tcp", L3n4Addr{mustAddr("fd00::a"), 443, TCP, ScopeExternal}, "[fd00::a]:443/TCP"},
		{"10.0.1.5:8080", L3n4Addr{mustAddr("10.0.1.5"), 8080, TCP, ScopeExternal}, "10.0.1.5:8080/TCP"},
		{"[fd00::1:5]:8443", L3n4Addr{mustAddr("fd00::1:5"), 8443, TCP, ScopeExternal}, "[fd00::1:5]:8443/TCP"},
		{"10.96.0.10:53/udp/internal", L3n4Addr{mustAddr("10.96.0.10"), 53, UDP, ScopeInternal}, "10.96.0.10:53/UDP/internal"},
		{"10.96.0.10:53/Udp/INTERNAL", L3n4Addr{mustAddr("10.96.0.10"), 53, UDP, ScopeInternal}, "10.96.0.10:53/UDP/internal"},
		{"10.96.0.10:53/udp/external", L3n4Addr{mustAddr("10.96.0.10"), 53, UDP, ScopeExternal}, "10.96.0.10:53/UDP"},
		{"[fd00::a]:443/sctp/internal", L3n4Addr{mustAddr("fd00::a"), 443, SCTP, ScopeInternal}, "[fd00::a]:443/SCTP/internal"},
		{"1.2.3.4:65535/any", L3n4Addr{mustAddr("1.2.3.4"), 65535, ANY, ScopeExternal}, "1.2.3.4:65535/ANY"},
		{"1.2.3.4:1", L3n4Addr{mustAddr("1.2.3.4"), 1, TCP, ScopeExternal}, "1.2.3.4:1/TCP"},
		{"1.2.3.4:0080", L3n4Addr{mustAddr("1.2.3.4"), 80, TCP, ScopeExternal}, "1.2.3.4:80/TCP"},
		{"0.0.0.0:30000/tcp", L3n4Addr{mustAddr("0.0.0.0"), 30000, TCP, ScopeExternal}, "0.0.0.0:30000/TCP"},
		{"[::]:30000/tcp", L3n4Addr{mustAddr("::"), 30000, TCP, ScopeExternal}, "[::]:30000/TCP"},
		// 4in6 is stored as IPv4.
		{"[::ffff:10.0.0.1]:80/tcp", L3n4Addr{mustAddr("10.0.0.1"), 80, TCP, ScopeExternal}, "10.0.0.1:80/TCP"},
	}
	for _, tc := range valid {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseL3n4Addr(tc.in)
			if err != nil {
				t.Fatalf("ParseL3n4Addr(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseL3n4Addr(%q) = %#v, want %#v", tc.in, got, tc.want)
			}
			if s := got.String(); s != tc.str {
				t.Errorf("String() = %q, want %q", s, tc.str)
			}
			back, err := ParseL3n4Addr(got.String())
			if err != nil || back != got {
				t.Errorf("round trip of %q: %v, %v", got.String(), back, err)
			}
			if err := got.Validate("address"); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}

	invalidCases := []struct {
		in  string
		msg string // exact message; "" checks only the type
	}{
		{"", `invalid address "": address is empty`},
		{"10.0.1.5", `invalid address "10.0.1.5": missing port`},
		{"10.0.1.5:", `invalid address "10.0.1.5:": missing port`},
		{"10.0.1.5:/tcp", `invalid address "10.0.1.5:/tcp": missing port`},
		{"[fd00::a]", `invalid address "[fd00::a]": missing port`},
		{"[fd00::a]:", `invalid address "[fd00::a]:": missing port`},
		{"10.0.1.5:0", `invalid address "10.0.1.5:0": port must be between 1 and 65535`},
		{"10.0.1.5:65536", `invalid address "10.0.1.5:65536": port must be between 1 and 65535`},
		{"10.0.1.5:99999999999999999999999", `invalid address "10.0.1.5:99999999999999999999999": port must be between 1 and 65535`},
		{"10.0.1.5:http", `invalid address "10.0.1.5:http": port "http" is not a decimal number`},
		{"10.0.1.5:-1", ""},
		{"10.0.1.5:+80", ""},
		{"10.0.1.5:0x50", ""},
		{"10.0.1.5:8 0", ""},
		{"[fe80::1%eth0]:80", `invalid address "[fe80::1%eth0]:80": IP address must not have a zone`},
		{"fe80::1%eth0:80", ""},
		{"10.0.1.256:80", `invalid address "10.0.1.256:80": "10.0.1.256" is not an IP address`},
		{"010.0.1.5:80", ""},
		{"example.com:80", ""},
		{"10.0.1.5:80/icmp", `invalid address "10.0.1.5:80/icmp": unknown protocol "icmp", want tcp, udp, sctp or any`},
		{"10.0.1.5:80/", `invalid address "10.0.1.5:80/": missing protocol after '/'`},
		{"10.0.1.5:80/tcp/", `invalid address "10.0.1.5:80/tcp/": missing scope after '/'`},
		{"10.0.1.5:80/tcp/cluster", `invalid address "10.0.1.5:80/tcp/cluster": unknown scope "cluster", want external or internal`},
		{"10.0.1.5:80/tcp/internal/x", `invalid address "10.0.1.5:80/tcp/internal/x": too many '/' parts, want IP:PORT[/PROTOCOL[/SCOPE]]`},
		{"10.0.1.5:80/internal", ""},
		{"fd00::a:443", `invalid address "fd00::a:443": IPv6 address must be in brackets, like [fd00::1]:80`},
		{"fd00::a", ""},
		{"::1", ""},
		{"[10.0.1.5]:80", `invalid address "[10.0.1.5]:80": only IPv6 addresses go in brackets`},
		{"[fd00::a:443", ""},
		{"[fd00::a]443", ""},
		{"[]:80", ""},
		{" 10.0.1.5:80", ""},
		{"10.0.1.5:80 ", ""},
		{"10.0.1.5:80/tcp ", ""},
		{"x10.0.1.5:80", ""},
		{"10.0.1.5:80:81", ""},
		{"/tcp", ""},
		{":80", ""},
	}
	for _, tc := range invalidCases {
		t.Run("invalid/"+tc.in, func(t *testing.T) {
			got, err := ParseL3n4Addr(tc.in)
			if err == nil {
				t.Fatalf("ParseL3n4Addr(%q) = %v, want error", tc.in, got)
			}
			ve := wantValidationError(t, err, "address", tc.msg)
			if ve.Value != tc.in {
				t.Errorf("Value = %q, want the input %q", ve.Value, tc.in)
			}
			if got != (L3n4Addr{}) {
				t.Errorf("got %#v with an error, want zero value", got)
			}
		})
	}
}

func TestNewL3n4Addr(t *testing.T) {
	a := NewL3n4Addr(mustAddr("::ffff:10.0.0.1"), 80, TCP, ScopeInternal)
	want := L3n4Addr{mustAddr("10.0.0.1"), 80, TCP, ScopeInternal}
	if a != want {
		t.Fatalf("NewL3n4Addr = %#v, want %#v", a, want)
	}
	if a.IsIPv6() {
		t.Error("unmapped address reports IPv6")
	}
	if !NewL3n4Addr(mustAddr("fd00::1"), 80, TCP, 0).IsIPv6() {
		t.Error("fd00::1 is not IPv6")
	}
	if ap := a.AddrPort(); ap != netip.MustParseAddrPort("10.0.0.1:80") {
		t.Errorf("AddrPort = %v", ap)
	}
	// A zone is kept, so Validate can report it.
	z := NewL3n4Addr(mustAddr("fe80::1%eth0"), 80, TCP, 0)
	wantValidationError(t, z.Validate("frontend"), "frontend", `invalid frontend "fe80::1%eth0": IP address must not have a zone`)
}

func TestL3n4AddrValidate(t *testing.T) {
	good := L3n4Addr{mustAddr("10.96.0.10"), 53, UDP, ScopeExternal}
	cases := []struct {
		name  string
		mod   func(*L3n4Addr)
		field string
		msg   string
	}{
		{"ok", func(*L3n4Addr) {}, "", ""},
		{"unspecified ok", func(a *L3n4Addr) { a.Addr = mustAddr("0.0.0.0") }, "", ""},
		{"v6 ok", func(a *L3n4Addr) { a.Addr = mustAddr("fd00::a") }, "", ""},
		{"internal ok", func(a *L3n4Addr) { a.Scope = ScopeInternal }, "", ""},
		{"any ok", func(a *L3n4Addr) { a.Protocol = ANY }, "", ""},
		{"no addr", func(a *L3n4Addr) { a.Addr = netip.Addr{} }, "fe", `invalid fe "": address is not set`},
		{"zone", func(a *L3n4Addr) { a.Addr = mustAddr("fe80::1%eth0") }, "fe", ""},
		{"4in6", func(a *L3n4Addr) { a.Addr = mustAddr("::ffff:10.0.0.1") }, "fe",
			`invalid fe "::ffff:10.0.0.1": IPv4-mapped IPv6 address, use the IPv4 form 10.0.0.1`},
		{"port 0", func(a *L3n4Addr) { a.Port = 0 }, "fe.port", `invalid fe.port "0": port must be between 1 and 65535`},
		{"protocol", func(a *L3n4Addr) { a.Protocol = 1 }, "fe.protocol", ""},
		{"scope", func(a *L3n4Addr) { a.Scope = 2 }, "fe.scope", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := good
			tc.mod(&a)
			err := a.Validate("fe")
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantValidationError(t, err, tc.field, tc.msg)
		})
	}
}

func TestL3n4AddrString(t *testing.T) {
	cases := []struct {
		a    L3n4Addr
		want string
	}{
		{L3n4Addr{mustAddr("10.96.0.10"), 53, UDP, ScopeExternal}, "10.96.0.10:53/UDP"},
		{L3n4Addr{mustAddr("fd00::a"), 443, TCP, ScopeInternal}, "[fd00::a]:443/TCP/internal"},
		{L3n4Addr{mustAddr("10.0.0.1"), 80, 99, 7}, "10.0.0.1:80/L4Type(99)/Scope(7)"},
		{L3n4Addr{}, "invalid AddrPort/ANY"},
	}
	for _, tc := range cases {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestL3n4AddrCompare(t *testing.T) {
	// Sorted order.
	sorted := []string{
		"1.2.3.4:80/tcp",
		"1.2.3.4:80/tcp/internal",
		"1.2.3.4:80/udp",
		"1.2.3.4:443/tcp",
		"1.2.3.5:1/any",
		"10.0.0.1:1/any",
		"[::1]:1/tcp",
		"[fd00::a]:80/tcp",
		"[fd00::a]:80/sctp",
	}
	var addrs []L3n4Addr
	for _, s := range sorted {
		a, err := ParseL3n4Addr(s)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	for i := range addrs {
		for j := range addrs {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := addrs[i].Compare(addrs[j]); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", addrs[i], addrs[j], got, want)
			}
		}
	}
	shuffled := slices.Clone(addrs)
	slices.Reverse(shuffled)
	slices.SortFunc(shuffled, L3n4Addr.Compare)
	if !slices.Equal(shuffled, addrs) {
		t.Errorf("sorted = %v, want %v", shuffled, addrs)
	}
}
