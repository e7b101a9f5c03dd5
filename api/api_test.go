package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		name, body string
		want       string // error message, "" for success
	}{
		{"ok", `{"id": 1, "frontend-address": {"ip": "10.0.0.1", "port": 80}}`, ""},
		{"null is absent", `{"frontend-address": {"ip": "10.0.0.1", "port": 80}, "backend-addresses": null, "flags": null}`, ""},
		{"empty", ``, "invalid request body: body is empty, want a JSON object"},
		{"whitespace", "  \n", "invalid request body: body is empty, want a JSON object"},
		{"truncated", `{"id": 1`, "invalid request body: malformed JSON: unexpected end of input"},
		{"syntax", `{"id": 1,}`, "invalid request body: malformed JSON at byte 10: invalid character '}' looking for beginning of object key string"},
		{"trailing", `{"id": 1} {}`, "invalid request body: malformed JSON: unexpected data after the JSON value at byte 10"},
		{"not an object", `[1]`, "invalid request body: want a JSON object, got an array"},
		{"null body", `null`, "invalid request body: want a JSON object, got null"},
		{"unknown top field", `{"idd": 1}`, `invalid idd: unknown field (known: id, frontend-address, backend-addresses, flags)`},
		{"unknown nested field", `{"frontend-address": {"ip": "10.0.0.1", "prot": "tcp"}}`, `invalid frontend-address.prot: unknown field (known: ip, port, protocol, scope)`},
		{"legacy flag", `{"flags": {"active-frontend": true}}`, `invalid flags.active-frontend: unknown field (actorlb always creates the revNAT entry with the service and deletes it with it)`},
		{"string for int", `{"frontend-address": {"port": "80"}}`, `invalid frontend-address.port "80": want an integer, got a string`},
		{"float for int", `{"frontend-address": {"port": 80.5}}`, `invalid frontend-address.port "80.5": want an integer between 0 and 65535`},
		{"exponent for int", `{"frontend-address": {"port": 8e1}}`, `invalid frontend-address.port "8e1": want an integer between 0 and 65535`},
		{"port out of range", `{"frontend-address": {"port": 70000}}`, `invalid frontend-address.port "70000": want an integer between 0 and 65535`},
		{"negative weight", `{"backend-addresses": [{"ip": "10.0.0.2", "weight": -1}]}`, `invalid backend-addresses[0].weight "-1": want an integer between 0 and 65535`},
		{"huge id", `{"id": 99999999999999999999}`, `invalid id "99999999999999999999": want an integer between -9223372036854775808 and 9223372036854775807`},
		{"object for array", `{"backend-addresses": {}}`, `invalid backend-addresses: want an array, got an object`},
		{"number for string", `{"backend-addresses": [{"ip": 10}]}`, `invalid backend-addresses[0].ip "10": want a string, got a number`},
		{"string for bool", `{"flags": {"sessionAffinity": "yes"}}`, `invalid flags.sessionAffinity "yes": want a boolean, got a string`},
		{"string for object", `{"flags": "x"}`, `invalid flags "x": want an object, got a string`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var spec ServiceSpec
			err := decodeStrict([]byte(tc.body), &spec)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
			var fe *FieldError
			require.True(t, errors.As(err, &fe))
		})
	}
}

func TestDecodeStrictRoundTrip(t *testing.T) {
	w := uint16(7)
	spec := &ServiceSpec{ID: 3, FrontendAddress: &FrontendAddress{IP: "fd00::a", Port: 443, Protocol: "udp", Scope: "internal"},
		BackendAddresses: []BackendAddress{{IP: "fd00::1", Port: 8443, Weight: &w, State: "quarantined", NodeLocal: true}, {IP: "fd00::2", Port: 8443}},
		Flags: &ServiceFlags{Type: "NodePort", TrafficPolicy: "Local", ExtTrafficPolicy: "Local", IntTrafficPolicy: "Local", SessionAffinity: true,
			SessionAffinityTimeout: 60, LBAlgorithm: "maglev", NatPolicy: "None", HealthCheckNodePort: 0}}
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	var got ServiceSpec
	require.NoError(t, decodeStrict(b, &got))
	require.Equal(t, spec, &got)
}

func TestToService(t *testing.T) {
	spec := func(mod func(*ServiceSpec)) *ServiceSpec {
		s := &ServiceSpec{FrontendAddress: &FrontendAddress{IP: "10.96.0.10", Port: 80},
			BackendAddresses: []BackendAddress{{IP: "10.0.1.5", Port: 8080}}}
		if mod != nil {
			mod(s)
		}
		return s
	}
	cases := []struct {
		name string
		spec *ServiceSpec
		want string // error, "" for success
		code int
	}{
		{"ok", spec(nil), "", 0},
		{"id matches", spec(func(s *ServiceSpec) { s.ID = 5 }), "", 0},
		{"id mismatch", spec(func(s *ServiceSpec) { s.ID = 6 }), `invalid id "6": does not match the service ID 5 in the path`, 460},
		{"no frontend", spec(func(s *ServiceSpec) { s.FrontendAddress = nil }), `invalid frontend-address: required`, 460},
		{"no ip", spec(func(s *ServiceSpec) { s.FrontendAddress.IP = "" }), `invalid frontend-address.ip: IP address is required`, 460},
		{"bad ip", spec(func(s *ServiceSpec) { s.FrontendAddress.IP = "10.96.0.300" }), `invalid frontend-address.ip "10.96.0.300": not an IP address`, 460},
		{"zone", spec(func(s *ServiceSpec) { s.FrontendAddress.IP = "fe80::1%eth0" }), `invalid frontend-address.ip "fe80::1%eth0": IP address must not have a zone`, 460},
		{"port 0", spec(func(s *ServiceSpec) { s.FrontendAddress.Port = 0 }), `invalid frontend-address.port "0": port must be between 1 and 65535`, 460},
		{"protocol", spec(func(s *ServiceSpec) { s.FrontendAddress.Protocol = "icmp" }), `invalid frontend-address.protocol "icmp": must be one of tcp, udp, sctp, any`, 460},
		{"scope", spec(func(s *ServiceSpec) { s.FrontendAddress.Scope = "global" }), `invalid frontend-address.scope "global": must be external or internal`, 460},
		{"backend ip", spec(func(s *ServiceSpec) { s.BackendAddresses[0].IP = "x" }), `invalid backend-addresses[0].ip "x": not an IP address`, 461},
		{"backend family", spec(func(s *ServiceSpec) { s.BackendAddresses[0].IP = "fd00::1" }),
			`invalid backend-addresses[0].ip "fd00::1": IPv6 backend [fd00::1]:8080 for IPv4 frontend 10.96.0.10:80`, 461},
		{"backend unspecified", spec(func(s *ServiceSpec) { s.BackendAddresses[0].IP = "0.0.0.0" }),
			`invalid backend-addresses[0].ip "0.0.0.0": backend address must not be unspecified`, 461},
		{"backend port", spec(func(s *ServiceSpec) { s.BackendAddresses[0].Port = 0 }), `invalid backend-addresses[0].port "0": port must be between 1 and 65535`, 461},
		{"backend state", spec(func(s *ServiceSpec) { s.BackendAddresses[0].State = "draining" }),
			`invalid backend-addresses[0].state "draining": must be one of active, terminating, quarantined, maintenance`, 461},
		{"duplicate backend", spec(func(s *ServiceSpec) { s.BackendAddresses = append(s.BackendAddresses, s.BackendAddresses[0]) }),
			`invalid backend-addresses[1] "10.0.1.5:8080/TCP": duplicate of backends[0]`, 461},
		{"type", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{Type: "Headless"} }),
			`invalid flags.type "Headless": must be one of ClusterIP, NodePort, ExternalIPs, LoadBalancer, HostPort, LocalRedirect`, 400},
		{"policy", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{ExtTrafficPolicy: "Node"} }), `invalid flags.extTrafficPolicy "Node": must be Cluster or Local`, 400},
		{"policies disagree", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{ExtTrafficPolicy: "Local", TrafficPolicy: "Cluster"} }),
			`invalid flags.trafficPolicy "Cluster": disagrees with flags.extTrafficPolicy "Local" (give one of them)`, 400},
		{"timeout without affinity", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{SessionAffinityTimeout: 5} }),
			`invalid flags.sessionAffinityTimeout "5": needs flags.sessionAffinity true`, 400},
		{"timeout too large", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{SessionAffinity: true, SessionAffinityTimeout: 1 << 24} }),
			`invalid flags.sessionAffinityTimeout "16777216": timeout must be at most 16777215 seconds`, 400},
		{"algorithm", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{LBAlgorithm: "rr"} }), `invalid flags.lbAlgorithm "rr": must be one of default, random, maglev`, 400},
		{"local on ClusterIP", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{ExtTrafficPolicy: "Local"} }),
			`invalid flags.extTrafficPolicy "Local": a ClusterIP service is reached only from inside the node: it has no external traffic policy (use the internal traffic policy)`, 400},
		{"upstream local on LocalRedirect", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{Type: "LocalRedirect", TrafficPolicy: "Local"} }),
			`invalid flags.extTrafficPolicy "Local": a LocalRedirect service is reached only from inside the node: it has no external traffic policy (use the internal traffic policy)`, 400},
		{"int local on ClusterIP", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{IntTrafficPolicy: "Local"} }), "", 0},
		{"nat46", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{NatPolicy: "Nat46"} }),
			`invalid flags.natPolicy "Nat46": NAT46/64 services are not supported (leave it out or give None)`, 400},
		{"nat none", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{NatPolicy: "None"} }), "", 0},
		{"health check node port", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{HealthCheckNodePort: 31000} }),
			`invalid flags.healthCheckNodePort "31000": actorlb serves no health check node port (leave it out or give 0)`, 400},
		{"name", spec(func(s *ServiceSpec) { s.Flags = &ServiceFlags{Namespace: "default"} }),
			`invalid flags.namespace "default": actorlb names a service by its ID and does not store names (leave it out)`, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := ToService(5, tc.spec)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, svc.Validate())
				require.Equal(t, lb.ServiceID(5), svc.Frontend.ID)
				return
			}
			require.EqualError(t, err, tc.want)
			require.Equal(t, tc.code, invalid(err).code)
		})
	}
}

func TestToServiceDefaultsAndRoundTrip(t *testing.T) {
	svc, err := ToService(9, &ServiceSpec{FrontendAddress: &FrontendAddress{IP: "::ffff:10.96.0.10", Port: 53},
		BackendAddresses: []BackendAddress{{IP: "10.0.1.5", Port: 53}}})
	require.NoError(t, err)
	require.Equal(t, "10.96.0.10:53/TCP", svc.Frontend.L3n4Addr.String(), "IPv4-mapped is unmapped, protocol defaults to tcp")
	require.Equal(t, lb.DefaultBackendWeight, svc.Backends[0].Weight)
	require.Equal(t, lb.TCP, svc.Backends[0].Protocol, "backends take the frontend's protocol")

	w := uint16(0)
	in := &ServiceSpec{ID: 4, FrontendAddress: &FrontendAddress{IP: "fd00::a", Port: 443, Protocol: "any", Scope: "internal"},
		BackendAddresses: []BackendAddress{{IP: "fd00::1", Port: 8443, Weight: &w, State: "terminating"}},
		Flags:            &ServiceFlags{Type: "LoadBalancer", TrafficPolicy: "Local", IntTrafficPolicy: "Local", SessionAffinity: true, SessionAffinityTimeout: 30, LBAlgorithm: "random"}}
	svc, err = ToService(4, in)
	require.NoError(t, err)
	out := FromService(svc)
	again, err := ToService(4, out)
	require.NoError(t, err)
	require.Equal(t, svc, again, "FromService output is accepted back unchanged")
	require.Equal(t, "any", out.FrontendAddress.Protocol)
	require.Equal(t, PolicyLocal, out.Flags.ExtTrafficPolicy)
	require.Equal(t, PolicyLocal, out.Flags.TrafficPolicy)
	require.Equal(t, "terminating", out.BackendAddresses[0].State)
	require.Equal(t, uint16(0), *out.BackendAddresses[0].Weight)
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(OpenAPI(), &doc))
	documented := map[string][]string{}
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented[path] = append(documented[path], strings.ToUpper(m))
		}
		slices.Sort(documented[path])
	}
	require.Equal(t, Routes(), documented)
}

func TestStatusErrorIs(t *testing.T) {
	for code, want := range map[int]error{
		404: ErrNotFound, 400: ErrInvalid, 413: ErrInvalid, 460: ErrInvalid, 461: ErrInvalid, 503: ErrUnavailable,
	} {
		err := fmt.Errorf("op: %w", &StatusError{Code: code, Message: "m"})
		require.ErrorIs(t, err, want, "code %d", code)
	}
	require.NotErrorIs(t, &StatusError{Code: 500}, ErrInvalid)
	require.Equal(t, "agent answered 500 Internal Server Error", (&StatusError{Code: http.StatusInternalServerError}).Error())
}

func TestParseHost(t *testing.T) {
	for in, want := range map[string][2]string{
		"unix:///var/run/actorlb/actorlb.sock": {"unix", "/var/run/actorlb/actorlb.sock"},
		"/tmp/a.sock":                          {"unix", "/tmp/a.sock"},
		"http://127.0.0.1:8080":                {"tcp", "127.0.0.1:8080"},
		"http://[::1]:80/":                     {"tcp", "[::1]:80"},
	} {
		n, a, err := ParseHost(in)
		require.NoError(t, err, in)
		require.Equal(t, want, [2]string{n, a}, in)
	}
	for _, in := range []string{"unix://relative.sock", "http://127.0.0.1", "https://127.0.0.1:1", "127.0.0.1:80", "http://127.0.0.1:80/v1", ""} {
		_, _, err := ParseHost(in)
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "invalid host")
	}
}

func TestDecodeStrictDuplicateFields(t *testing.T) {
	var spec ServiceSpec
	err := decodeStrict([]byte(`{"frontend-address": {"ip": "10.0.0.1", "port": 80, "port": 81}}`), &spec)
	require.EqualError(t, err, `invalid frontend-address.port: field given twice`)
	require.Equal(t, StatusInvalidFrontend, invalid(err).code)
	err = decodeStrict([]byte(`{"backend-addresses": [{"ip": "a"}, {"ip": "b", "ip": "c"}]}`), &spec)
	require.EqualError(t, err, `invalid backend-addresses[1].ip: field given twice`)
	err = decodeStrict([]byte(`{"id": 1, "id": 1}`), &spec)
	require.EqualError(t, err, `invalid id: field given twice`)
}
