package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// sourceEngine holds one API and one Kubernetes service.
type sourceEngine struct {
	statsEngine
	svcs []*lb.Service
}

func (e *sourceEngine) List(context.Context) ([]*lb.Service, error) { return e.svcs, nil }
func (e *sourceEngine) Get(_ context.Context, id lb.ServiceID) (*lb.Service, error) {
	for _, s := range e.svcs {
		if s.Frontend.ID == id {
			return s.DeepCopy(), nil
		}
	}
	return nil, actorlb.ErrServiceNotFound
}

func sourceServer(t *testing.T) *Server {
	t.Helper()
	k8s := &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{}, ID: 2}, Source: lb.SourceKubernetes}
	var err error
	k8s.Frontend.L3n4Addr, err = lb.ParseL3n4Addr("10.96.0.2:80")
	require.NoError(t, err)
	own := &lb.Service{Frontend: lb.Frontend{ID: 1}}
	own.Frontend.L3n4Addr, err = lb.ParseL3n4Addr("10.96.0.1:80")
	require.NoError(t, err)
	eng := &sourceEngine{statsEngine: statsEngine{failingEngine: failingEngine{err: errors.New("not called")},
		st: actorlb.Stats{Ready: true, Services: 2}}, svcs: []*lb.Service{own, k8s}}
	return newTestServer(t, eng, Config{
		Sources: func() []SourceStatus {
			return []SourceStatus{{Name: "kubernetes", Connected: true, Synced: true, Services: 1, Frontends: 1, NodeAddresses: []string{}}}
		},
		ServiceName: func(fe lb.L3n4Addr) (string, string, bool) {
			if fe == k8s.Frontend.L3n4Addr {
				return "ns", "web", true
			}
			return "", "", false
		},
	})
}

// /v1/healthz reports the sources and the services by source.
func TestHealthzReportsTheSources(t *testing.T) {
	s := sourceServer(t)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var st Status
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
	require.Len(t, st.Sources, 1)
	require.True(t, st.Sources[0].Synced)
	require.Equal(t, map[string]int{"api": 1, "kubernetes": 1}, st.ServicesBySource)
}

// A Kubernetes service is answered with its namespace and name; an API
// service with none.
func TestServicesOfASourceCarryTheirName(t *testing.T) {
	s := sourceServer(t)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var list []Service
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
	require.Len(t, list, 2)
	require.Equal(t, "api", list[0].Spec.Flags.Source)
	require.Empty(t, list[0].Spec.Flags.Name)
	require.Equal(t, "kubernetes", list[1].Spec.Flags.Source)
	require.Equal(t, "ns", list[1].Spec.Flags.Namespace)
	require.Equal(t, "web", list[1].Spec.Flags.Name)
	require.Equal(t, "web", list[1].Status.Realized.Flags.Name)

	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service/2", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var one Service
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &one))
	require.Equal(t, "ns", one.Spec.Flags.Namespace)
}
