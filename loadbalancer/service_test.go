package loadbalancer

import (
	"net/netip"
	"testing"
)

func be(s string) Backend {
	b, err := ParseBackend(s)
	if err != nil {
		panic(err)
	}
	return b
}

func fe(s string, id ServiceID) Frontend {
	a, err := ParseL3n4Addr(s)
	if err != nil {
		panic(err)
	}
	return Frontend{L3n4Addr: a, ID: id}
}

func goodService() *Service {
	return &Service{
		Frontend: fe("10.96.0.10:80/tcp", 7),
		Backends: []Backend{be("10.0.1.5:8080/tcp"), be("10.0.1.6:8080/tcp"), be("10.0.1.7:8080/tcp")},
		Type:     SVCTypeClusterIP,
	}
}

func TestServiceValidate(t *testing.T) {
	cases := []struct {
		name  string
		mod   func(*Service)
		field string // "" means valid
		msg   string
	}{
		{"ok", func(*Service) {}, "", ""},
		{"no backends", func(s *Service) { s.Backends = nil }, "", ""},
		{"id 0 allocates", func(s *Service) { s.Frontend.ID = 0 }, "", ""},
		{"surrogate frontend", func(s *Service) { s.Frontend.Addr = mustAddr("0.0.0.0"); s.Type = SVCTypeNodePort }, "", ""},
		{"internal scope", func(s *Service) { s.Frontend.Scope = ScopeInternal }, "", ""},
		{"weight 0", func(s *Service) { s.Backends[0].Weight = 0 }, "", ""},
		{"all states", func(s *Service) {
			s.Backends[0].State = BackendStateTerminating
			s.Backends[1].State = BackendStateQuarantined
			s.Backends[2].State = BackendStateMaintenance
		}, "", ""},
		{"backend scope ignored", func(s *Service) { s.Backends[0].Scope = 9 }, "", ""},
		{"any frontend, mixed backends", func(s *Service) {
			s.Frontend.Protocol = ANY
			s.Backends[1].Protocol = UDP
			s.Backends = append(s.Backends, be("10.0.1.5:8080/udp")) // same addr:port, other protocol: not a duplicate
		}, "", ""},
		{"ipv6", func(s *Service) {
			s.Frontend = fe("[fd00::a]:443/tcp", 0)
			s.Backends = []Backend{be("[fd00::1:5]:8443")}
		}, "", ""},
		{"max timeout", func(s *Service) { s.SessionAffinity = true; s.SessionAffinityTimeout = 0xFFFFFF }, "", ""},
		{"source ranges", func(s *Service) {
			s.Type = SVCTypeLoadBalancer
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.7/32")}
		}, "", ""},
		{"source ranges deny", func(s *Service) {
			s.Type = SVCTypeNodePort
			s.SourceRanges, s.SourceRangesDeny = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, true
		}, "", ""},
		{"source ranges on ClusterIP", func(s *Service) {
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		}, "source-ranges", `invalid source-ranges "192.0.2.0/24": a ClusterIP service is reached only from inside the node: source ranges apply to traffic from outside (LoadBalancer, NodePort, ExternalIPs, HostPort)`},
		{"source range of the other family", func(s *Service) {
			s.Type = SVCTypeLoadBalancer
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("fd00::/8")}
		}, "source-ranges[1]", `invalid source-ranges[1] "fd00::/8": not of the frontend's address family`},
		{"source range with host bits", func(s *Service) {
			s.Type = SVCTypeLoadBalancer
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")}
		}, "source-ranges[0]", `invalid source-ranges[0] "192.0.2.1/24": has host bits set: did you mean 192.0.2.0/24?`},
		{"duplicate source range", func(s *Service) {
			s.Type = SVCTypeLoadBalancer
			s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("192.0.2.0/24")}
		}, "source-ranges[1]", `invalid source-ranges[1] "192.0.2.0/24": duplicate of source-ranges[0]`},
		{"too many source ranges", func(s *Service) {
			s.Type = SVCTypeLoadBalancer
			for i := range MaxSourceRanges + 1 {
				s.SourceRanges = append(s.SourceRanges, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24))
			}
		}, "source-ranges", `invalid source-ranges "257 prefixes": at most 256`},
		{"deny list without ranges", func(s *Service) { s.Type = SVCTypeLoadBalancer; s.SourceRangesDeny = true }, "source-ranges-deny", `invalid source-ranges-deny "true": a deny list needs source-ranges`},
		{"maglev", func(s *Service) { s.LBAlgorithm = LBAlgMaglev }, "", ""},

		{"frontend unset", func(s *Service) { s.Frontend.Addr = netip.Addr{} }, "frontend", `invalid frontend "": address is not set`},
		{"frontend zone", func(s *Service) { s.Frontend.Addr = mustAddr("fe80::1%eth0") }, "frontend", ""},
		{"frontend 4in6", func(s *Service) { s.Frontend.Addr = mustAddr("::ffff:10.96.0.10") }, "frontend", ""},
		{"frontend port", func(s *Service) { s.Frontend.Port = 0 }, "frontend.port", `invalid frontend.port "0": port must be between 1 and 65535`},
		{"frontend protocol", func(s *Service) { s.Frontend.Protocol = 1 }, "frontend.protocol", ""},
		{"frontend scope", func(s *Service) { s.Frontend.Scope = 2 }, "frontend.scope", ""},
		{"frontend before backends", func(s *Service) { s.Frontend.Port = 0; s.Backends[0].Port = 0 }, "frontend.port", ""},

		{"backend unset", func(s *Service) { s.Backends[1].Addr = netip.Addr{} }, "backends[1].address", ""},
		{"backend zone", func(s *Service) {
			s.Frontend = fe("[fd00::a]:80/tcp", 0)
			s.Backends = []Backend{be("[fd00::1]:80")}
			s.Backends[0].Addr = mustAddr("fe80::1%eth0")
		}, "backends[0].address", ""},
		{"backend 4in6", func(s *Service) { s.Backends[0].Addr = mustAddr("::ffff:10.0.1.5") }, "backends[0].address", ""},
		{"backend unspecified v4", func(s *Service) { s.Backends[2].Addr = mustAddr("0.0.0.0") }, "backends[2].address",
			`invalid backends[2].address "0.0.0.0": backend address must not be unspecified`},
		{"backend unspecified v6", func(s *Service) {
			s.Frontend = fe("[fd00::a]:80/tcp", 0)
			s.Backends = []Backend{be("[::]:80")}
		}, "backends[0].address", ""},
		{"v6 backend for v4 frontend", func(s *Service) { s.Backends[1] = be("[fd00::1]:80/tcp") }, "backends[1].address",
			`invalid backends[1].address "fd00::1": IPv6 backend [fd00::1]:80 for IPv4 frontend 10.96.0.10:80`},
		{"v4 backend for v6 frontend", func(s *Service) { s.Frontend = fe("[fd00::a]:80/tcp", 0) }, "backends[0].address",
			`invalid backends[0].address "10.0.1.5": IPv4 backend 10.0.1.5:8080 for IPv6 frontend [fd00::a]:80`},
		{"backend port", func(s *Service) { s.Backends[2].Port = 0 }, "backends[2].port",
			`invalid backends[2].port "0": port must be between 1 and 65535`},
		{"backend protocol unknown", func(s *Service) { s.Backends[0].Protocol = 250 }, "backends[0].protocol", ""},
		{"backend protocol differs", func(s *Service) { s.Backends[1].Protocol = UDP }, "backends[1].protocol",
			`invalid backends[1].protocol "UDP": backend protocol must equal the frontend protocol TCP`},
		{"backend any for tcp frontend", func(s *Service) { s.Backends[1].Protocol = ANY }, "backends[1].protocol", ""},
		{"backend state", func(s *Service) { s.Backends[1].State = 4 }, "backends[1].state", ""},
		{"duplicate", func(s *Service) { s.Backends = append(s.Backends, be("10.0.1.6:8080/tcp")) }, "backends[3]",
			`invalid backends[3] "10.0.1.6:8080/TCP": duplicate of backends[1]`},
		{"duplicate other weight and state", func(s *Service) {
			d := be("10.0.1.5:8080")
			d.Weight, d.State, d.Scope = 1, BackendStateTerminating, ScopeInternal
			s.Backends = append(s.Backends, d)
		}, "backends[3]", ""},
		{"first backend error wins", func(s *Service) { s.Backends[2].Port = 0; s.Backends[1].State = 9 }, "backends[1].state", ""},
		{"backends before type", func(s *Service) { s.Backends[0].Port = 0; s.Type = 42 }, "backends[0].port", ""},

		{"frontend 0.0.0.0 of a ClusterIP service is refused", func(s *Service) { s.Frontend.Addr = mustAddr("0.0.0.0") }, "frontend",
			`invalid frontend "0.0.0.0": the unspecified address is only the surrogate frontend of a NodePort or HostPort service (every node address); give the service's own address`},
		{"frontend :: of a LoadBalancer service is refused", func(s *Service) {
			s.Frontend = fe("[::]:80/tcp", 0)
			s.Backends = []Backend{be("[fd00::1]:80")}
			s.Type = SVCTypeLoadBalancer
		}, "frontend", ""},
		{"frontend :: of a NodePort service is the surrogate", func(s *Service) {
			s.Frontend = fe("[::]:30080/tcp", 0)
			s.Backends = []Backend{be("[fd00::1]:80")}
			s.Type = SVCTypeNodePort
		}, "", ""},
		{"frontend 255.255.255.255 is refused", func(s *Service) { s.Frontend.Addr = mustAddr("255.255.255.255") }, "frontend",
			`invalid frontend "255.255.255.255": the broadcast address cannot be a service frontend`},
		{"frontend 255.255.255.255 of a NodePort service is refused", func(s *Service) {
			s.Frontend.Addr = mustAddr("255.255.255.255")
			s.Type = SVCTypeNodePort
		}, "frontend", ""},
		{"backend equal to its own frontend is refused", func(s *Service) { s.Backends[1] = be("10.96.0.10:80/tcp") }, "backends[1]",
			`invalid backends[1] "10.96.0.10:80/TCP": backend is the frontend itself (connections to it would loop back to the service)`},
		{"backend equal to its own any-protocol frontend is refused", func(s *Service) {
			s.Frontend.Protocol = ANY
			s.Backends[0] = be("10.96.0.10:80/udp")
		}, "backends[0]", ""},
		{"backend on the frontend address with another port is fine", func(s *Service) { s.Backends[1] = be("10.96.0.10:8080/tcp") }, "", ""},

		{"type", func(s *Service) { s.Type = 6 }, "type", `invalid type "6": unknown service type`},
		{"timeout", func(s *Service) { s.SessionAffinity = true; s.SessionAffinityTimeout = 0x1000000 }, "session-affinity-timeout",
			`invalid session-affinity-timeout "16777216": timeout must be at most 16777215 seconds`},
		{"timeout without affinity", func(s *Service) { s.SessionAffinityTimeout = 1 << 31 }, "session-affinity-timeout", ""},
		{"lb algorithm", func(s *Service) { s.LBAlgorithm = 3 }, "lb-algorithm", ""},
		{"type before algorithm", func(s *Service) { s.LBAlgorithm = 3; s.Type = 9 }, "type", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := goodService()
			tc.mod(s)
			err := s.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			ve := wantValidationError(t, err, tc.field, tc.msg)
			wantFE := tc.field == "frontend" || len(tc.field) > 9 && tc.field[:9] == "frontend."
			wantBE := len(tc.field) >= 8 && tc.field[:8] == "backends"
			if ve.IsFrontend() != wantFE || ve.IsBackend() != wantBE {
				t.Errorf("IsFrontend/IsBackend = %v/%v, want %v/%v", ve.IsFrontend(), ve.IsBackend(), wantFE, wantBE)
			}
		})
	}
	var nilSvc *Service
	wantValidationError(t, nilSvc.Validate(), "service", "")
}

func TestServiceDeepCopy(t *testing.T) {
	s := goodService()
	c := s.DeepCopy()
	if c == s || &c.Backends[0] == &s.Backends[0] {
		t.Fatal("DeepCopy shares memory")
	}
	c.Backends[0].Weight = 1
	c.Backends = append(c.Backends, be("10.0.1.9:1"))
	c.Frontend.ID = 99
	if s.Backends[0].Weight != DefaultBackendWeight || len(s.Backends) != 3 || s.Frontend.ID != 7 {
		t.Error("changing the copy changed the original")
	}
	if (*Service)(nil).DeepCopy() != nil {
		t.Error("nil DeepCopy")
	}
	empty := (&Service{}).DeepCopy()
	if empty.Backends != nil {
		t.Error("nil Backends became non-nil")
	}
}

func TestServiceFlags(t *testing.T) {
	cases := []struct {
		name           string
		typ            ServiceType
		frontend       string
		ext, intl, aff bool
		flags, flags2  uint8
	}{
		{"ClusterIP", SVCTypeClusterIP, "10.96.0.10:80", false, false, false, FlagRoutable, 0},
		{"NodePort", SVCTypeNodePort, "192.168.1.10:30080", false, false, false, FlagNodePort | FlagRoutable, 0},
		{"NodePort surrogate", SVCTypeNodePort, "0.0.0.0:30080", false, false, false, FlagNodePort, 0},
		{"NodePort surrogate v6", SVCTypeNodePort, "[::]:30080", false, false, false, FlagNodePort, 0},
		{"ExternalIPs", SVCTypeExternalIPs, "203.0.113.5:80", false, false, false, FlagExternalIP | FlagRoutable, 0},
		{"LoadBalancer", SVCTypeLoadBalancer, "203.0.113.6:443", false, false, false, FlagLoadBalancer | FlagRoutable, 0},
		{"HostPort", SVCTypeHostPort, "192.168.1.10:8080", false, false, false, FlagHostPort | FlagRoutable, 0},
		{"HostPort 0.0.0.0", SVCTypeHostPort, "0.0.0.0:8080", false, false, false, FlagHostPort | FlagRoutable, 0},
		{"LocalRedirect", SVCTypeLocalRedirect, "169.254.20.10:53", false, false, false, 0, Flag2LocalRedirect},
		{"ext local: two scopes", SVCTypeNodePort, "192.168.1.10:30080", true, false, false, FlagNodePort | FlagRoutable | FlagExtLocalScope, Flag2TwoScopes},
		{"int local on NodePort: two scopes", SVCTypeNodePort, "192.168.1.10:30080", false, true, false, FlagNodePort | FlagRoutable, Flag2IntLocalScope | Flag2TwoScopes},
		{"both local: one set", SVCTypeLoadBalancer, "203.0.113.6:443", true, true, false, FlagLoadBalancer | FlagRoutable | FlagExtLocalScope, Flag2IntLocalScope},
		{"int local on ClusterIP: one set", SVCTypeClusterIP, "10.96.0.10:80", false, true, false, FlagRoutable, Flag2IntLocalScope},
		{"affinity", SVCTypeClusterIP, "10.96.0.10:80", false, false, true, FlagRoutable | FlagAffinity, 0},
		{"all options LB", SVCTypeLoadBalancer, "203.0.113.6:443", true, true, true,
			FlagLoadBalancer | FlagRoutable | FlagExtLocalScope | FlagAffinity, Flag2IntLocalScope},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{Frontend: fe(tc.frontend, 1), Type: tc.typ,
				ExtTrafficPolicyLocal: tc.ext, IntTrafficPolicyLocal: tc.intl, SessionAffinity: tc.aff}
			f, f2 := s.Flags()
			if f != tc.flags || f2 != tc.flags2 {
				t.Errorf("Flags() = %#08b, %#08b; want %#08b, %#08b", f, f2, tc.flags, tc.flags2)
			}
		})
	}
	// Bit positions from the layouts document.
	bits := []uint8{FlagExternalIP, FlagNodePort, FlagExtLocalScope, FlagHostPort, FlagAffinity, FlagLoadBalancer, FlagRoutable, FlagSourceRange}
	bits2 := []uint8{Flag2LocalRedirect, Flag2NAT46x64, Flag2L7LoadBalancer, Flag2L7Delegate, Flag2IntLocalScope, Flag2TwoScopes, Flag2SourceRangeDeny, Flag2FwdModeDSR}
	for i := range bits {
		if bits[i] != 1<<i || bits2[i] != 1<<i {
			t.Errorf("flag bit %d: %#x, %#x", i, bits[i], bits2[i])
		}
	}
	if f, f2 := (*Service)(nil).Flags(); f != 0 || f2 != 0 {
		t.Error("nil Flags")
	}
}

func TestServiceAffinityAlgo(t *testing.T) {
	cases := []struct {
		aff     bool
		timeout uint32
		alg     LBAlgorithm
		want    uint32
	}{
		{false, 0, LBAlgDefault, 0},
		{false, 300, LBAlgDefault, 0},
		{false, 0, LBAlgMaglev, 0x02000000},
		{true, 0, LBAlgDefault, 10800},
		{true, 10800, LBAlgMaglev, 0x02002a30}, // test vector: bytes 30 2a 00 02
		{true, 60, LBAlgRandom, 0x0100003c},
		{true, 0xFFFFFF, LBAlgMaglev, 0x02FFFFFF},
	}
	for _, tc := range cases {
		s := &Service{SessionAffinity: tc.aff, SessionAffinityTimeout: tc.timeout, LBAlgorithm: tc.alg}
		if got := s.AffinityAlgo(); got != tc.want {
			t.Errorf("AffinityAlgo(%v, %d, %v) = %#x, want %#x", tc.aff, tc.timeout, tc.alg, got, tc.want)
		}
	}
	if (*Service)(nil).AffinityAlgo() != 0 {
		t.Error("nil AffinityAlgo")
	}
}

func TestLocalPoliciesChooseTheBackendSets(t *testing.T) {
	cases := []struct {
		name           string
		typ            ServiceType
		ext, intl      bool
		two            bool
		extSet, intSet bool // whether the set at that scope is node-local only
	}{
		{"ClusterIP cluster", SVCTypeClusterIP, false, false, false, false, false},
		{"ClusterIP int local", SVCTypeClusterIP, false, true, false, true, true},
		{"NodePort ext local", SVCTypeNodePort, true, false, true, true, false},
		{"NodePort int local", SVCTypeNodePort, false, true, true, false, true},
		{"LoadBalancer both local", SVCTypeLoadBalancer, true, true, false, true, true},
		{"LocalRedirect int local", SVCTypeLocalRedirect, false, true, false, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{Type: tc.typ, ExtTrafficPolicyLocal: tc.ext, IntTrafficPolicyLocal: tc.intl}
			if got := s.TwoScopes(); got != tc.two {
				t.Errorf("TwoScopes() = %v, want %v", got, tc.two)
			}
			if got := s.ScopeLocal(ScopeExternal); got != tc.extSet {
				t.Errorf("ScopeLocal(external) = %v, want %v", got, tc.extSet)
			}
			if tc.two {
				if got := s.ScopeLocal(ScopeInternal); got != tc.intSet {
					t.Errorf("ScopeLocal(internal) = %v, want %v", got, tc.intSet)
				}
			}
		})
	}
}

func TestExternalPolicyLocalIsRefusedWithoutAnExternalSide(t *testing.T) {
	for _, typ := range []ServiceType{SVCTypeClusterIP, SVCTypeLocalRedirect} {
		s := &Service{Frontend: fe("10.96.0.10:80", 0), Type: typ, ExtTrafficPolicyLocal: true}
		wantValidationError(t, s.Validate(), "external-traffic-policy", "")
	}
	s := &Service{Frontend: fe("10.96.0.10:30080", 0), Type: SVCTypeNodePort, ExtTrafficPolicyLocal: true}
	if err := s.Validate(); err != nil {
		t.Fatalf("NodePort with external Local: %v", err)
	}
}
