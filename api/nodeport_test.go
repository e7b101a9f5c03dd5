package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// memEngine keeps the services it is given, by ID (no maps): enough to
// check what the server lets through and answers.
type memEngine struct {
	failingEngine
	mu   sync.Mutex
	svcs map[lb.ServiceID]*lb.Service
}

func (m *memEngine) Upsert(_ context.Context, svc *lb.Service) (lb.ServiceID, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.svcs == nil {
		m.svcs = map[lb.ServiceID]*lb.Service{}
	}
	_, had := m.svcs[svc.Frontend.ID]
	m.svcs[svc.Frontend.ID] = svc.DeepCopy()
	return svc.Frontend.ID, !had, nil
}

func (m *memEngine) UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]actorlb.UpsertResult, error) {
	out := make([]actorlb.UpsertResult, len(svcs))
	for i, s := range svcs {
		out[i].ID, out[i].Created, out[i].Err = m.Upsert(ctx, s)
	}
	return out, nil
}

func (m *memEngine) Get(_ context.Context, id lb.ServiceID) (*lb.Service, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.svcs[id]; ok {
		return s.DeepCopy(), nil
	}
	return nil, actorlb.ErrServiceNotFound
}

func (m *memEngine) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.svcs)
}

func nodePortServer(t *testing.T) (*Server, *memEngine) {
	t.Helper()
	eng := &memEngine{}
	s := newTestServer(t, eng, Config{NodePort: &NodePortConfig{
		Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::1")},
	}})
	return s, eng
}

func put(t *testing.T, s *Server, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", path, strings.NewReader(body)))
	return rec
}

func nodePortSpec(ip string, port int) string {
	b, _ := json.Marshal(ServiceSpec{FrontendAddress: &FrontendAddress{IP: ip, Port: uint16(port)},
		BackendAddresses: []BackendAddress{{IP: "10.0.1.5", Port: 8080}}, Flags: &ServiceFlags{Type: "NodePort"}})
	if strings.Contains(ip, ":") {
		b, _ = json.Marshal(ServiceSpec{FrontendAddress: &FrontendAddress{IP: ip, Port: uint16(port)},
			BackendAddresses: []BackendAddress{{IP: "fd00::5", Port: 8080}}, Flags: &ServiceFlags{Type: "NodePort"}})
	}
	return string(b)
}

func TestNodePortOnTheSurrogateOrANodeAddressInTheRangeIsAccepted(t *testing.T) {
	s, eng := nodePortServer(t)
	for i, fe := range []struct {
		ip   string
		port int
	}{{"0.0.0.0", 30000}, {"192.168.1.10", 32767}, {"127.0.0.1", 30080}, {"10.0.0.1", 30080}, {"::", 30080}, {"::1", 30080}} {
		rec := put(t, s, "/v1/service/"+string(rune('1'+i)), nodePortSpec(fe.ip, fe.port))
		require.Equal(t, http.StatusCreated, rec.Code, "%v: %s", fe, rec.Body.String())
	}
	require.Equal(t, 6, eng.count())
}

func TestNodePortOutsideTheRangeIs460NamingThePortAndTheAgentFlag(t *testing.T) {
	s, eng := nodePortServer(t)
	for _, port := range []int{80, 29999, 32768} {
		rec := put(t, s, "/v1/service/1", nodePortSpec("0.0.0.0", port))
		require.Equal(t, StatusInvalidFrontend, rec.Code, rec.Body.String())
		require.Contains(t, rec.Body.String(), `invalid frontend-address.port`)
		require.Contains(t, rec.Body.String(), `node port range 30000-32767`)
		require.Contains(t, rec.Body.String(), `--node-port-range`)
	}
	// The same port on another type is no NodePort: not checked.
	body := strings.Replace(nodePortSpec("10.96.0.10", 80), "NodePort", "LoadBalancer", 1)
	require.Equal(t, http.StatusCreated, put(t, s, "/v1/service/2", body).Code)
	require.Equal(t, 1, eng.count(), "only the LoadBalancer service was written")
}

func TestNodePortOnAForeignAddressIs460NamingTheAddressAndTheAgentFlag(t *testing.T) {
	s, eng := nodePortServer(t)
	rec := put(t, s, "/v1/service/1", nodePortSpec("10.96.0.10", 30080))
	require.Equal(t, StatusInvalidFrontend, rec.Code)
	var msg string
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &msg))
	require.Equal(t, `invalid frontend-address.ip "10.96.0.10": a NodePort frontend must be the surrogate 0.0.0.0 or one of the node's addresses `+
		`(the node addresses are 192.168.1.10, 127.0.0.1, 10.0.0.1): use one of those, give another type (ExternalIPs, LoadBalancer), `+
		`or add the address to the agent's --node-addresses`, msg)

	// In a batch: that item alone is refused, with the same code.
	rec = put(t, s, "/v1/services", `[`+strings.Replace(nodePortSpec("10.96.0.10", 30080), `{`, `{"id":1,`, 1)+`,`+
		strings.Replace(nodePortSpec("127.0.0.1", 30080), `{`, `{"id":2,`, 1)+`,`+
		strings.Replace(nodePortSpec("127.0.0.1", 80), `{`, `{"id":3,`, 1)+`]`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var rs []BatchResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rs))
	require.Equal(t, []int{StatusInvalidFrontend, http.StatusCreated, StatusInvalidFrontend}, []int{rs[0].Code, rs[1].Code, rs[2].Code})
	require.Contains(t, rs[0].Error, "frontend-address.ip")
	require.Contains(t, rs[2].Error, "frontend-address.port")
	require.Equal(t, 1, eng.count())
}

func TestWithoutANodePortConfigNodePortServicesAreNotChecked(t *testing.T) {
	eng := &memEngine{}
	s := newTestServer(t, eng, Config{})
	require.Equal(t, http.StatusCreated, put(t, s, "/v1/service/1", nodePortSpec("10.96.0.10", 80)).Code)
}

func TestConfigReportsTheNodeAddressesAndTheNodePortRange(t *testing.T) {
	eng := &memEngine{}
	s := newTestServer(t, eng, Config{NodePort: &NodePortConfig{Range: lb.PortRange{Min: 20000, Max: 20999},
		Addresses: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("::1")}}})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/config", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var c DaemonConfiguration
	require.NoError(t, DecodeStrict(rec.Body.Bytes(), &c))
	require.Equal(t, []string{"127.0.0.1", "192.168.1.10", "::1"}, c.Status.NodeAddresses)
	require.Equal(t, "20000-20999", c.Status.NodePortRange)
	require.Equal(t, [2]uint16{20000, 20999}, [2]uint16{c.Status.NodePortMin, c.Status.NodePortMax})
	require.Equal(t, &NodeAddressingElement{Enabled: true, IP: "192.168.1.10"}, c.Status.Addressing.IPv4)
	require.Equal(t, &NodeAddressingElement{Enabled: true}, c.Status.Addressing.IPv6, "::1 is no global unicast address")
	require.Equal(t, http.StatusCreated, put(t, s, "/v1/service/1", nodePortSpec("192.168.1.10", 20000)).Code)
	require.Equal(t, StatusInvalidFrontend, put(t, s, "/v1/service/2", nodePortSpec("192.168.1.10", 30000)).Code)
}

func TestMaglevIsAcceptedWithAWarningThatTheSocketLBIgnoresIt(t *testing.T) {
	s, _ := newTestServerMem(t)
	body := `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080}], "flags": {"lbAlgorithm": "maglev"}}`
	rec := put(t, s, "/v1/service/1", body)
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Equal(t, `299 actorlb "`+MaglevWarning+`"`, rec.Header().Get("Warning"))
	var svc Service
	require.NoError(t, DecodeStrict(rec.Body.Bytes(), &svc))
	require.Equal(t, "maglev", svc.Spec.Flags.LBAlgorithm)
	require.Equal(t, []string{MaglevWarning}, svc.Status.Warnings)

	get := httptest.NewRecorder()
	s.Handler().ServeHTTP(get, httptest.NewRequest("GET", "/v1/service/1", nil))
	require.Contains(t, get.Body.String(), "no effect on the socket LB", "a GET says it too")

	rec = put(t, s, "/v1/services", `[{"id": 2, "frontend-address": {"ip": "10.96.0.11", "port": 80}, "flags": {"lbAlgorithm": "maglev"}},
		{"id": 3, "frontend-address": {"ip": "10.96.0.12", "port": 80}, "flags": {"lbAlgorithm": "random"}}]`)
	var rs []BatchResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rs))
	require.Equal(t, []string{MaglevWarning}, rs[0].Warnings)
	require.Empty(t, rs[1].Warnings)

	rec = put(t, s, "/v1/service/4", strings.Replace(body, "maglev", "random", 1))
	require.Empty(t, rec.Header().Get("Warning"))
	require.NotContains(t, rec.Body.String(), "warnings")
}

func newTestServerMem(t *testing.T) (*Server, *memEngine) {
	t.Helper()
	eng := &memEngine{}
	return newTestServer(t, eng, Config{}), eng
}

func TestWeightOver65535IsRefusedNamingTheWeight(t *testing.T) {
	s, eng := newTestServerMem(t)
	rec := put(t, s, "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8080, "weight": 65536}]}`)
	require.Equal(t, StatusInvalidBackend, rec.Code)
	require.Contains(t, rec.Body.String(), `invalid backend-addresses[0].weight \"65536\": want an integer between 0 and 65535`)
	require.Zero(t, eng.count())
}

func TestNodeLocalAndPoliciesSurviveTheConversionBothWays(t *testing.T) {
	spec := &ServiceSpec{FrontendAddress: &FrontendAddress{IP: "192.0.2.10", Port: 443, Protocol: "tcp", Scope: "external"},
		BackendAddresses: []BackendAddress{{IP: "10.0.1.5", Port: 8443, NodeLocal: true}, {IP: "10.0.1.6", Port: 8443}},
		Flags:            &ServiceFlags{Type: "LoadBalancer", ExtTrafficPolicy: "Local", SessionAffinity: true, SessionAffinityTimeout: 30}}
	svc, err := ToService(9, spec)
	require.NoError(t, err)
	require.True(t, svc.Backends[0].NodeLocal)
	require.False(t, svc.Backends[1].NodeLocal)
	require.True(t, svc.TwoScopes(), "ext Local, int Cluster: two backend sets")
	back := FromService(svc)
	require.True(t, back.BackendAddresses[0].NodeLocal)
	require.Equal(t, "Local", back.Flags.ExtTrafficPolicy)
	require.Equal(t, "Cluster", back.Flags.IntTrafficPolicy)
	again, err := ToService(9, back)
	require.NoError(t, err, "an answer can be PUT back as it is")
	require.Equal(t, svc, again)
}

func TestSourceOtherThanAPIIsRefusedNamingTheField(t *testing.T) {
	s, eng := newTestServerMem(t)
	rec := put(t, s, "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [], "flags": {"source": "kubernetes"}}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), `flags.source`)
	require.Contains(t, rec.Body.String(), `only the kubernetes sync writes kubernetes services`)
	rec = put(t, s, "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [], "flags": {"source": "nobody"}}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), `must be api or kubernetes`)
	require.Zero(t, eng.count())
	rec = put(t, s, "/v1/service/1", `{"frontend-address": {"ip": "10.96.0.10", "port": 80}, "backend-addresses": [], "flags": {"source": "api"}}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, 1, eng.count())
}
