package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// flags.sourceRanges and flags.sourceRangesDeny go through a real engine
// (kernel maps) and come back on GET, in the engine's order, after a
// restart too.
func TestSourceRangesRoundTripThroughTheEngine(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	open := func() *actorlb.Engine {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		log := logrus.New()
		log.SetOutput(io.Discard)
		e, err := actorlb.New(ctx, actorlb.Config{BPFRoot: root, Logger: log})
		require.NoError(t, err)
		return e
	}
	get := func(s *Server) Service {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/service/1", nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var svc Service
		require.NoError(t, DecodeStrict(rec.Body.Bytes(), &svc))
		return svc
	}
	e := open()
	s := newTestServer(t, e, Config{})
	rec := put(t, s, "/v1/service/1", `{"frontend-address": {"ip": "203.0.113.10", "port": 443}, "backend-addresses": [{"ip": "10.0.1.5", "port": 8443}],
		"flags": {"type": "LoadBalancer", "sourceRanges": ["192.0.2.0/24", "10.0.0.0/8"], "sourceRangesDeny": true}}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	got := get(s)
	require.Equal(t, []string{"10.0.0.0/8", "192.0.2.0/24"}, got.Spec.Flags.SourceRanges)
	require.True(t, got.Spec.Flags.SourceRangesDeny)
	require.NoError(t, e.Close())

	e = open()
	t.Cleanup(func() { e.Close() })
	again := get(newTestServer(t, e, Config{}))
	require.Equal(t, got.Spec.Flags, again.Spec.Flags, "the same after a restart")
}
