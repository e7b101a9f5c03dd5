package loadbalancer

import "testing"

func TestParseL4Type(t *testing.T) {
	valid := []struct {
		in   string
		want L4Type
		str  string
	}{
		{"tcp", TCP, "TCP"}, {"TCP", TCP, "TCP"}, {"Tcp", TCP, "TCP"},
		{"udp", UDP, "UDP"}, {"UDP", UDP, "UDP"},
		{"sctp", SCTP, "SCTP"}, {"SCTP", SCTP, "SCTP"},
		{"any", ANY, "ANY"}, {"ANY", ANY, "ANY"},
	}
	for _, tc := range valid {
		got, err := ParseL4Type(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseL4Type(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.str)
		}
		if back, err := ParseL4Type(got.String()); err != nil || back != got {
			t.Errorf("round trip %q: %v, %v", got.String(), back, err)
		}
	}
	if TCP != 6 || UDP != 17 || SCTP != 132 || ANY != 0 {
		t.Error("L4Type values must be the IP protocol numbers")
	}
	for _, in := range []string{"", "icmp", "6", " tcp", "tcp ", "tcp6"} {
		_, err := ParseL4Type(in)
		wantValidationError(t, err, "protocol", "")
	}
	_, err := ParseL4Type("icmp")
	wantValidationError(t, err, "protocol", `invalid protocol "icmp": must be one of tcp, udp, sctp, any`)
	if s := L4Type(1).String(); s != "L4Type(1)" {
		t.Errorf("unknown L4Type String() = %q", s)
	}
}

func TestParseScope(t *testing.T) {
	valid := []struct {
		in   string
		want Scope
	}{
		{"external", ScopeExternal}, {"EXTERNAL", ScopeExternal},
		{"internal", ScopeInternal}, {"Internal", ScopeInternal},
	}
	for _, tc := range valid {
		got, err := ParseScope(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseScope(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseScope(got.String()); err != nil || back != got {
			t.Errorf("round trip %q: %v, %v", got.String(), back, err)
		}
	}
	for _, in := range []string{"", "e", "i", "cluster", "0"} {
		_, err := ParseScope(in)
		wantValidationError(t, err, "scope", "")
	}
	_, err := ParseScope("")
	wantValidationError(t, err, "scope", `invalid scope "": must be external or internal`)
	if ScopeExternal.String() != "external" || ScopeInternal.String() != "internal" || Scope(5).String() != "Scope(5)" {
		t.Error("Scope.String")
	}
}

func TestParseServiceType(t *testing.T) {
	valid := []struct {
		in   string
		want ServiceType
		str  string
	}{
		{"", SVCTypeClusterIP, "ClusterIP"},
		{"ClusterIP", SVCTypeClusterIP, "ClusterIP"},
		{"clusterip", SVCTypeClusterIP, "ClusterIP"},
		{"NodePort", SVCTypeNodePort, "NodePort"},
		{"NODEPORT", SVCTypeNodePort, "NodePort"},
		{"ExternalIPs", SVCTypeExternalIPs, "ExternalIPs"},
		{"LoadBalancer", SVCTypeLoadBalancer, "LoadBalancer"},
		{"HostPort", SVCTypeHostPort, "HostPort"},
		{"localredirect", SVCTypeLocalRedirect, "LocalRedirect"},
	}
	for _, tc := range valid {
		got, err := ParseServiceType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseServiceType(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("String() = %q, want %q", got.String(), tc.str)
		}
		if back, err := ParseServiceType(got.String()); err != nil || back != got {
			t.Errorf("round trip %q: %v, %v", got.String(), back, err)
		}
	}
	for _, in := range []string{"External", "cluster-ip", "0", " NodePort"} {
		_, err := ParseServiceType(in)
		wantValidationError(t, err, "type", "")
	}
	_, err := ParseServiceType("Ingress")
	wantValidationError(t, err, "type", `invalid type "Ingress": must be one of ClusterIP, NodePort, ExternalIPs, LoadBalancer, HostPort, LocalRedirect`)
	if s := ServiceType(6).String(); s != "ServiceType(6)" {
		t.Errorf("unknown type String() = %q", s)
	}
	if ServiceType(6).IsValid() || !SVCTypeLocalRedirect.IsValid() {
		t.Error("ServiceType.IsValid")
	}
}

func TestParseLBAlgorithm(t *testing.T) {
	valid := []struct {
		in   string
		want LBAlgorithm
	}{
		{"", LBAlgDefault}, {"default", LBAlgDefault}, {"random", LBAlgRandom},
		{"Random", LBAlgRandom}, {"maglev", LBAlgMaglev}, {"MAGLEV", LBAlgMaglev},
	}
	for _, tc := range valid {
		got, err := ParseLBAlgorithm(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseLBAlgorithm(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseLBAlgorithm(got.String()); err != nil || back != got {
			t.Errorf("round trip %q: %v, %v", got.String(), back, err)
		}
	}
	if LBAlgDefault != 0 || LBAlgRandom != 1 || LBAlgMaglev != 2 {
		t.Error("LBAlgorithm values must match the datapath")
	}
	_, err := ParseLBAlgorithm("roundrobin")
	wantValidationError(t, err, "lb-algorithm", `invalid lb-algorithm "roundrobin": must be one of default, random, maglev`)
	if s := LBAlgorithm(3).String(); s != "LBAlgorithm(3)" {
		t.Errorf("unknown algorithm String() = %q", s)
	}
}
