package agent_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/verify"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// documented returns, for the agent's OpenAPI document, the status codes of
// every path template and method.
func documented(t testing.TB, a *agent) map[string]map[string][]int {
	t.Helper()
	r := a.doString(t, "GET", "/v1/openapi.json", "")
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, api.OpenAPI(), r.body, "the agent serves the document kept in the repository")
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(r.body, &doc))
	out := map[string]map[string][]int{}
	for path, ops := range doc.Paths {
		out[path] = map[string][]int{}
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			for code := range op.Responses {
				n, err := strconv.Atoi(code)
				require.NoError(t, err)
				out[path][strings.ToUpper(method)] = append(out[path][strings.ToUpper(method)], n)
			}
		}
	}
	return out
}

// checker sends requests and checks each status against the OpenAPI
// document.
type checker struct {
	t   *testing.T
	a   *agent
	doc map[string]map[string][]int
}

func template(path string) string {
	if strings.HasPrefix(path, "/v1/service/") {
		return "/v1/service/{id}"
	}
	return path
}

func (c *checker) expect(method, path, body string, want int) rawResponse {
	c.t.Helper()
	r := c.a.doString(c.t, method, path, body)
	require.Equal(c.t, want, r.code, "%s %s: %s", method, path, r.body)
	require.Contains(c.t, c.doc[template(path)][method], want, "%s %s answered %d, which openapi.json does not document", method, path, want)
	if want >= 400 {
		var msg string
		require.NoError(c.t, json.Unmarshal(r.body, &msg), "%s %s: the error is a JSON string: %s", method, path, r.body)
		require.NotEmpty(c.t, msg)
	}
	return r
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	return v
}

func TestEndpoints(t *testing.T) {
	a := startAgent(t, "")
	c := &checker{t: t, a: a, doc: documented(t, a)}

	// Health and status.
	st := decode[api.Status](t, c.expect("GET", "/v1/healthz", "", http.StatusOK).body)
	require.Equal(t, "Ok", st.State)
	require.True(t, st.Ready)
	require.Equal(t, a.root, st.BPFRoot)
	require.Equal(t, []string{"unix://" + a.socket}, st.Listen)
	require.Len(t, st.Maps, 12) // the six, lb_members, lb_affinity_match, lb4/lb6_maglev, lb4/lb6_source_range

	// Empty list is an empty array.
	require.JSONEq(t, `[]`, string(c.expect("GET", "/v1/service", "", http.StatusOK).body))

	// Create (201), same again (200), change (200).
	body := `{"frontend-address": {"ip": "10.96.0.10", "port": 80, "protocol": "tcp"},
		"backend-addresses": [{"ip": "10.0.1.6", "port": 8080}, {"ip": "10.0.1.5", "port": 8080, "weight": 5}]}`
	created := decode[api.Service](t, c.expect("PUT", "/v1/service/1", body, http.StatusCreated).body)
	require.Equal(t, int64(1), created.Spec.ID)
	require.Equal(t, created.Spec, created.Status.Realized)
	require.Equal(t, "10.0.1.5", created.Spec.BackendAddresses[0].IP, "backends in slot order")
	require.Equal(t, uint16(5), *created.Spec.BackendAddresses[0].Weight)
	c.expect("PUT", "/v1/service/1", body, http.StatusOK)
	body2 := `{"id": 1, "frontend-address": {"ip": "10.96.0.10", "port": 80},
		"backend-addresses": [{"ip": "10.0.1.5", "port": 8080}, {"ip": "10.0.1.7", "port": 8080, "state": "terminating"}],
		"flags": {"type": "LoadBalancer", "trafficPolicy": "Local", "sessionAffinity": true}}`
	updated := decode[api.Service](t, c.expect("PUT", "/v1/service/1", body2, http.StatusOK).body)
	require.Equal(t, "LoadBalancer", updated.Spec.Flags.Type)
	require.Equal(t, api.PolicyLocal, updated.Spec.Flags.ExtTrafficPolicy)
	require.Equal(t, uint32(10800), updated.Spec.Flags.SessionAffinityTimeout)
	require.Equal(t, "terminating", updated.Spec.BackendAddresses[1].State)

	// An IPv6 service with protocol any.
	c.expect("PUT", "/v1/service/65535", `{"frontend-address": {"ip": "fd00::a", "port": 53, "protocol": "any"},
		"backend-addresses": [{"ip": "fd00::1", "port": 5353}]}`, http.StatusCreated)

	// Get.
	got := decode[api.Service](t, c.expect("GET", "/v1/service/1", "", http.StatusOK).body)
	require.Equal(t, updated, got)
	c.expect("GET", "/v1/service/2", "", http.StatusNotFound)
	c.expect("GET", "/v1/service/abc", "", http.StatusBadRequest)
	// IDs outside 1..65535 name no service: 404, as upstream v1.6 answers.
	c.expect("GET", "/v1/service/0", "", http.StatusNotFound)
	c.expect("GET", "/v1/service/-1", "", http.StatusNotFound)
	c.expect("GET", "/v1/service/65536", "", http.StatusNotFound)
	c.expect("DELETE", "/v1/service/0", "", http.StatusNotFound)
	c.expect("DELETE", "/v1/service/-7", "", http.StatusNotFound)
	list := decode[[]api.Service](t, c.expect("GET", "/v1/service", "", http.StatusOK).body)
	require.Len(t, list, 2)
	require.Equal(t, int64(1), list[0].Spec.ID)
	require.Equal(t, "any", list[1].Spec.FrontendAddress.Protocol)

	// Conflicts with the engine's state: 460 and 461, nothing changed.
	r := c.expect("PUT", "/v1/service/2", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}}`, api.StatusInvalidFrontend)
	require.Contains(t, string(r.body), "frontend 10.96.0.10:80/TCP is already registered with ID 1")
	r = c.expect("PUT", "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.11", "port": 80}}`, api.StatusInvalidFrontend)
	require.Contains(t, string(r.body), "service ID 1 is already registered to 10.96.0.10:80/TCP")
	r = c.expect("PUT", "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80},
		"backend-addresses": [{"ip": "10.0.1.7", "port": 8080, "state": "active"}]}`, api.StatusInvalidBackend)
	require.Contains(t, string(r.body), "cannot change from terminating to active (terminating is final)")

	// RevNAT: one entry per service, owned by it.
	revs := decode[[]api.RevNATEntry](t, c.expect("GET", "/v1/lb/revnat", "", http.StatusOK).body)
	require.Equal(t, []api.RevNATEntry{
		{ID: 1, IP: "10.96.0.10", Port: 80, Service: true},
		{ID: 65535, IP: "fd00::a", Port: 53, Service: true},
	}, revs)

	// Maps: what the agent reports is what is pinned.
	dump := decode[api.MapsDump](t, c.expect("GET", "/v1/lb/maps", "", http.StatusOK).body)
	pinned, err := verify.DumpPinned(a.root)
	require.NoError(t, err)
	require.Equal(t, mapsDump(a.root, pinned), dump)
	require.Len(t, dump.Services4, 4) // ext Local, int Cluster: two sets; the external one empty (no node-local backend), the internal one with 2 slots
	require.Len(t, dump.Backends4, 2)
	require.Empty(t, verify.Check(pinned))

	// Health counts every map's entries as pinned (from the maps' owners).
	pinnedCounts := map[string]int{
		maps.Service4Name: len(pinned.Services4), maps.Backend4Name: len(pinned.Backends4), maps.RevNAT4Name: len(pinned.RevNAT4),
		maps.Service6Name: len(pinned.Services6), maps.Backend6Name: len(pinned.Backends6), maps.RevNAT6Name: len(pinned.RevNAT6),
		maps.MembersName: len(pinned.Members), maps.AffinityMatchName: len(pinned.AffinityMatch),
		maps.SourceRange4Name: 0, maps.SourceRange6Name: 0,
	}
	for _, k := range pinned.SourceRanges {
		if k.Family() == maps.IPv6 {
			pinnedCounts[maps.SourceRange6Name]++
		} else {
			pinnedCounts[maps.SourceRange4Name]++
		}
	}
	readers, closeReaders, err := verify.OpenPinnedMaglev(a.root)
	require.NoError(t, err)
	for i, name := range []string{maps.Maglev4Name, maps.Maglev6Name} {
		ids, err := readers[i].IDs()
		require.NoError(t, err)
		pinnedCounts[name] = len(ids)
	}
	closeReaders()
	st = decode[api.Status](t, c.expect("GET", "/v1/healthz", "", http.StatusOK).body)
	healthCounts := map[string]int{}
	for _, m := range st.Maps {
		healthCounts[m.Name] = m.Entries
		require.InDelta(t, float64(m.Entries)/float64(m.MaxEntries), m.Fill, 1e-12, m.Name)
	}
	require.Equal(t, pinnedCounts, healthCounts)

	// Metrics.
	r = c.expect("GET", "/metrics", "", http.StatusOK)
	require.Contains(t, r.hdr.Get("Content-Type"), "text/plain")
	for name, n := range pinnedCounts {
		require.Contains(t, string(r.body), fmt.Sprintf(`actorlb_map_entries{map=%q} %d`, name, n))
	}
	for _, want := range []string{
		`actorlb_operations_total{operation="service_put",result="ok"} 4`,
		`actorlb_operations_total{operation="service_put",result="invalid"} 3`,
		`actorlb_operations_total{operation="service_get",result="not_found"} 4`,
		`actorlb_operation_duration_seconds_bucket{operation="service_put",le="+Inf"} 7`,
		`actorlb_map_entries{map="lb4_services"} 4`, // two backend sets (see above)
		`actorlb_map_max_entries{map="lb4_services"} 65536`,
		`actorlb_map_fill_ratio{map="lb6_services"}`,
		`actorlb_map_writes_total{map="lb4_backends",op="update"}`,
		`actorlb_actor_restarts_total{actor="svc4"} 0`,
		`actorlb_actor_restarts_total{actor="supervisor"} 0`,
		`actorlb_restore_services 0`,
		`actorlb_restore_writes 0`,
		`actorlb_services 2`,
		`actorlb_up 1`,
		`go_goroutines`,
	} {
		require.Contains(t, string(r.body), want)
	}

	// Delete.
	c.expect("DELETE", "/v1/service/1", "", http.StatusOK)
	c.expect("DELETE", "/v1/service/1", "", http.StatusNotFound)
	c.expect("DELETE", "/v1/service/x1", "", http.StatusBadRequest)
	c.expect("DELETE", "/v1/service/65535", "", http.StatusOK)
	pinned, err = verify.DumpPinned(a.root)
	require.NoError(t, err)
	require.Equal(t, mapsDump(a.root, pinned), decode[api.MapsDump](t, c.expect("GET", "/v1/lb/maps", "", http.StatusOK).body))
	require.Empty(t, pinned.Services4)
	require.Empty(t, pinned.Backends4)
	require.Empty(t, pinned.RevNAT6)

	// Many at once: one result per spec, each what its own PUT would get.
	batch := `[
		{"id": 10, "frontend-address": {"ip": "10.96.1.10", "port": 80}, "backend-addresses": [{"ip": "10.0.2.1", "port": 8080}]},
		{"id": 11, "frontend-address": {"ip": "10.96.1.11", "port": 80}, "backend-addresses": [{"ip": "10.0.2.2", "port": 8080}]},
		{"id": 12, "frontend-address": {"ip": "10.96.1.12", "port": 80}, "backend-addresses": [{"ip": "10.0.2.3", "port": 0}]},
		{"id": 10, "frontend-address": {"ip": "10.96.1.10", "port": 80}, "backend-addresses": [{"ip": "10.0.2.1", "port": 8080}, {"ip": "10.0.2.4", "port": 8080}]}
	]`
	results := decode[[]api.BatchResult](t, c.expect("PUT", "/v1/services", batch, http.StatusOK).body)
	require.Equal(t, []int{http.StatusCreated, http.StatusCreated, api.StatusInvalidBackend, http.StatusOK},
		[]int{results[0].Code, results[1].Code, results[2].Code, results[3].Code}, "%+v", results)
	require.Contains(t, results[2].Error, "port")
	got10 := decode[api.Service](t, c.expect("GET", "/v1/service/10", "", http.StatusOK).body)
	require.Len(t, got10.Spec.BackendAddresses, 2, "the second spec of frontend 10 updated it")
	c.expect("GET", "/v1/service/12", "", http.StatusNotFound)
	c.expect("PUT", "/v1/services", `{"id": 1}`, http.StatusBadRequest)
	pinned, err = verify.DumpPinned(a.root)
	require.NoError(t, err)
	require.Empty(t, verify.Check(pinned))
	deleted := decode[[]api.BatchResult](t, c.expect("DELETE", "/v1/services", `[10, 99, 0, 10]`, http.StatusOK).body)
	require.Equal(t, []int{http.StatusOK, http.StatusNotFound, http.StatusBadRequest, http.StatusBadRequest},
		[]int{deleted[0].Code, deleted[1].Code, deleted[2].Code, deleted[3].Code}, "%+v", deleted)
	c.expect("DELETE", "/v1/services", `{"id": 1}`, http.StatusBadRequest)
	c.expect("DELETE", "/v1/service/11", "", http.StatusOK)

	// Methods and paths that do not exist.
	r = a.doString(t, "POST", "/v1/service", "{}")
	require.Equal(t, http.StatusMethodNotAllowed, r.code)
	require.Equal(t, "GET", r.hdr.Get("Allow"))
	r = a.doString(t, "GET", "/v1/services", "")
	require.Equal(t, http.StatusMethodNotAllowed, r.code)
	require.Equal(t, "DELETE, PUT", r.hdr.Get("Allow"))
	require.Equal(t, http.StatusNotFound, a.doString(t, "GET", "/v1/servicez", "").code)
	require.Equal(t, http.StatusNotFound, a.doString(t, "GET", "/v1/service/", "").code)
}

// TestMapFullIs500: a write the maps cannot take is a 500 that names the
// map, and the previous version of the service stays.
func TestMapFullIs500(t *testing.T) {
	a := startAgent(t, "", "--map-max", "3")
	doc := documented(t, a)
	c := &checker{t: t, a: a, doc: doc}
	c.expect("PUT", "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80},
		"backend-addresses": [{"ip": "10.0.1.5", "port": 8080}]}`, http.StatusCreated)
	before, err := verify.DumpPinned(a.root)
	require.NoError(t, err)
	r := c.expect("PUT", "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80},
		"backend-addresses": [{"ip": "10.0.1.5", "port": 8080}, {"ip": "10.0.1.6", "port": 8080}, {"ip": "10.0.1.7", "port": 8080}]}`,
		http.StatusInternalServerError)
	require.Contains(t, string(r.body), "map full")
	after, err := verify.DumpPinned(a.root)
	require.NoError(t, err)
	require.Equal(t, mapsDump(a.root, before), mapsDump(a.root, after))
	got, err := a.client.GetService(ctxT(t), 1)
	require.NoError(t, err)
	require.Len(t, got.Spec.BackendAddresses, 1)
}

// TestTCPListener: --api-addr serves the same API on loopback TCP, to
// clients that carry the token.
func TestTCPListener(t *testing.T) {
	tokenFile := writeToken(t, "tcp-listener-token")
	a := startAgent(t, "", "--api-addr", "127.0.0.1:0", "--api-token-file", tokenFile)
	u := a.tcpURL(t)
	c, err := api.NewClient(u, api.WithToken("tcp-listener-token"))
	require.NoError(t, err)
	defer c.Close()
	st, err := c.Health(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, []string{"unix://" + a.socket, u}, st.Listen)
	_, created, err := c.PutService(ctxT(t), 7, &api.ServiceSpec{FrontendAddress: &api.FrontendAddress{IP: "10.96.0.7", Port: 80}})
	require.NoError(t, err)
	require.True(t, created)
	res := runCLI(t, "service", "get", "7", "-H", u, "-o", "json", "--token-file", tokenFile)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, int64(7), decode[api.Service](t, []byte(res.stdout)).Spec.ID)
	require.Contains(t, fmt.Sprint(st.Listen), "127.0.0.1")
}
