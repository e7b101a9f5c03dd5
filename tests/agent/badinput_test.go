package agent_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/internal/verify"
	"github.com/stretchr/testify/require"
)

// mapWrites returns the agent's map write counters (entries written and
// deleted per map since it started).
func mapWrites(t testing.TB, a *agent) map[string][2]uint64 {
	t.Helper()
	st, err := a.client.Health(ctxT(t))
	require.NoError(t, err)
	out := map[string][2]uint64{}
	for _, m := range st.Maps {
		out[m.Name] = [2]uint64{m.Updated, m.Deleted}
	}
	return out
}

// TestBadInputs sends every kind of bad request: each gets its documented
// status and a message naming the field and the reason, and no map is
// written (not even with the same values: the write counters stay).
func TestBadInputs(t *testing.T) {
	a := startAgent(t, "")
	c := &checker{t: t, a: a, doc: documented(t, a)}
	c.expect("PUT", "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80},
		"backend-addresses": [{"ip": "10.0.1.5", "port": 8080, "state": "terminating"}]}`, http.StatusCreated)

	fe := `"frontend-address": {"ip": "10.96.0.20", "port": 80}`
	cases := []struct {
		name, path, body string
		code             int
		msg              string
	}{
		{"malformed JSON", "/v1/service/2", `{` + fe + `,`, 400, `invalid request body: malformed JSON: unexpected end of input`},
		{"syntax error", "/v1/service/2", `{"frontend-address": {ip: 1}}`, 400, `invalid request body: malformed JSON at byte 23: invalid character 'i' looking for beginning of object key string`},
		{"trailing data", "/v1/service/2", `{` + fe + `} x`, 400, `invalid request body: malformed JSON: unexpected data after the JSON value at byte 55`},
		{"empty body", "/v1/service/2", ``, 400, `invalid request body: body is empty, want a JSON object`},
		{"array body", "/v1/service/2", `[]`, 400, `invalid request body: want a JSON object, got an array`},
		{"wrong type port", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.20", "port": "80"}}`, 460, `invalid frontend-address.port "80": want an integer, got a string`},
		{"wrong type ip", "/v1/service/2", `{"frontend-address": {"ip": 10, "port": 80}}`, 460, `invalid frontend-address.ip "10": want a string, got a number`},
		{"wrong type backends", "/v1/service/2", `{` + fe + `, "backend-addresses": {"ip": "10.0.1.9"}}`, 461, `invalid backend-addresses: want an array, got an object`},
		{"wrong type weight", "/v1/service/2", `{` + fe + `, "backend-addresses": [{"ip": "10.0.1.9", "port": 1, "weight": 1.5}]}`, 461, `invalid backend-addresses[0].weight "1.5": want an integer between 0 and 65535`},
		{"wrong type flags", "/v1/service/2", `{` + fe + `, "flags": []}`, 400, `invalid flags: want an object, got an array`},
		{"wrong type id", "/v1/service/2", `{"id": "2", ` + fe + `}`, 460, `invalid id "2": want an integer, got a string`},
		{"duplicate field", "/v1/service/2", `{` + fe + `, "frontend-address": {"ip": "10.96.0.10", "port": 80}}`, 460, `invalid frontend-address: field given twice`},
		{"unknown field", "/v1/service/2", `{` + fe + `, "backends": []}`, 400, `invalid backends: unknown field (known: id, frontend-address, backend-addresses, flags)`},
		{"unknown frontend field", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.20", "port": 80, "proto": "tcp"}}`, 460, `invalid frontend-address.proto: unknown field (known: ip, port, protocol, scope)`},
		{"unknown backend field", "/v1/service/2", `{` + fe + `, "backend-addresses": [{"ip": "10.0.1.9", "port": 1, "nodeName": "n1"}]}`, 461, `invalid backend-addresses[0].nodeName: unknown field (known: ip, port, weight, state, nodeLocal)`},
		{"legacy active-frontend", "/v1/service/2", `{` + fe + `, "flags": {"active-frontend": false}}`, 400, `invalid flags.active-frontend: unknown field (actorlb always creates the revNAT entry with the service and deletes it with it)`},
		{"missing frontend", "/v1/service/2", `{"backend-addresses": []}`, 460, `invalid frontend-address: required`},
		{"missing ip", "/v1/service/2", `{"frontend-address": {"port": 80}}`, 460, `invalid frontend-address.ip: IP address is required`},
		{"bad ip", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.256", "port": 80}}`, 460, `invalid frontend-address.ip "10.96.0.256": not an IP address`},
		{"bad backend ip", "/v1/service/2", `{` + fe + `, "backend-addresses": [{"ip": "backend-1", "port": 8080}]}`, 461, `invalid backend-addresses[0].ip "backend-1": not an IP address`},
		{"port 70000", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.20", "port": 70000}}`, 460, `invalid frontend-address.port "70000": want an integer between 0 and 65535`},
		{"backend port 70000", "/v1/service/2", `{` + fe + `, "backend-addresses": [{"ip": "10.0.1.9", "port": 70000}]}`, 461, `invalid backend-addresses[0].port "70000": want an integer between 0 and 65535`},
		{"port 0", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.20", "port": 0}}`, 460, `invalid frontend-address.port "0": port must be between 1 and 65535`},
		{"ID 0", "/v1/service/0", `{` + fe + `}`, 460, `invalid id "0": service ID must be between 1 and 65535`},
		{"ID 65536", "/v1/service/65536", `{` + fe + `}`, 460, `invalid id "65536": service ID must be between 1 and 65535`},
		{"ID not a number", "/v1/service/two", `{` + fe + `}`, 460, `invalid id "two": not a decimal number`},
		{"body ID differs", "/v1/service/2", `{"id": 3, ` + fe + `}`, 460, `invalid id "3": does not match the service ID 2 in the path`},
		{"body ID 65536", "/v1/service/2", `{"id": 65536, ` + fe + `}`, 460, `invalid id "65536": does not match the service ID 2 in the path`},
		{"v4 frontend, v6 backend", "/v1/service/2", `{` + fe + `, "backend-addresses": [{"ip": "fd00::1", "port": 8080}]}`, 461,
			`invalid backend-addresses[0].ip "fd00::1": IPv6 backend [fd00::1]:8080 for IPv4 frontend 10.96.0.20:80`},
		{"unknown protocol", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.20", "port": 80, "protocol": "quic"}}`, 460,
			`invalid frontend-address.protocol "quic": must be one of tcp, udp, sctp, any`},
		{"unknown scope", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.20", "port": 80, "scope": "cluster"}}`, 460,
			`invalid frontend-address.scope "cluster": must be external or internal`},
		{"unknown state", "/v1/service/2", `{` + fe + `, "backend-addresses": [{"ip": "10.0.1.9", "port": 8080, "state": "draining"}]}`, 461,
			`invalid backend-addresses[0].state "draining": must be one of active, terminating, quarantined, maintenance`},
		{"duplicate backend", "/v1/service/2", `{` + fe + `, "backend-addresses": [{"ip": "10.0.1.9", "port": 1}, {"ip": "10.0.1.9", "port": 1}]}`, 461,
			`invalid backend-addresses[1] "10.0.1.9:1/TCP": duplicate of backends[0]`},
		{"unknown type", "/v1/service/2", `{` + fe + `, "flags": {"type": "ExternalName"}}`, 400,
			`invalid flags.type "ExternalName": must be one of ClusterIP, NodePort, ExternalIPs, LoadBalancer, HostPort, LocalRedirect`},
		{"frontend taken by another ID", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}}`, 460,
			`upsert service 10.96.0.10:80/TCP: frontend in use: frontend 10.96.0.10:80/TCP is already registered with ID 1`},
		{"forbidden state change", "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]}`, 461,
			`upsert service 10.96.0.10:80/TCP: backend 10.0.1.5:8080: invalid state "active": cannot change from terminating to active (terminating is final)`},
	}

	before, err := verify.DumpPinned(a.root)
	require.NoError(t, err)
	writes := mapWrites(t, a)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{t: t, a: a, doc: c.doc}
			r := c.expect("PUT", tc.path, tc.body, tc.code)
			var msg string
			require.NoError(t, json.Unmarshal(r.body, &msg))
			require.Equal(t, tc.msg, msg)
		})
	}

	t.Run("10 MB body", func(t *testing.T) {
		big := append([]byte(`{"frontend-address": {"ip": "10.96.0.20", "port": 80}, "backend-addresses": [`), bytes.Repeat([]byte(`{"ip": "10.0.1.9", "port": 1},`), 10<<20/30)...)
		big = append(big[:len(big)-1], "]}"...)
		require.Greater(t, len(big), 10<<20-100)
		r := a.do(t, "PUT", "/v1/service/2", bytes.NewReader(big))
		require.Equal(t, http.StatusRequestEntityTooLarge, r.code)
		require.Contains(t, c.doc["/v1/service/{id}"]["PUT"], r.code)
		require.JSONEq(t, `"invalid request body: larger than 1048576 bytes"`, string(r.body))
	})

	t.Run("maps unchanged", func(t *testing.T) {
		after, err := verify.DumpPinned(a.root)
		require.NoError(t, err)
		require.Equal(t, mapsDump(a.root, before), mapsDump(a.root, after))
		require.Equal(t, writes, mapWrites(t, a), "no map was written")
		svcs, err := a.client.ListServices(ctxT(t))
		require.NoError(t, err)
		require.Len(t, svcs, 1)
		require.Equal(t, "terminating", svcs[0].Spec.BackendAddresses[0].State)
	})

	// The CLI reports the same refusals on stderr with exit status 1.
	res := a.cli(t, "service", "update", "--id", "2", "--frontend", "10.96.0.10:80")
	require.Equal(t, 1, res.code)
	require.Equal(t, "actorlb: put service 2: upsert service 10.96.0.10:80/TCP: frontend in use: frontend 10.96.0.10:80/TCP is already registered with ID 1\n", res.stderr)
	require.Empty(t, res.stdout)
	require.True(t, strings.HasPrefix(res.stderr, "actorlb: "))
}
