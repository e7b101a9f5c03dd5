package api

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/actorlb/actorlb"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

func TestBuildInfoIsExported(t *testing.T) {
	b := Build()
	require.Equal(t, runtime.Version(), b.GoVersion)
	require.NotEmpty(t, b.Version)
	require.Contains(t, b.String(), b.GoVersion)

	eng := &statsEngine{failingEngine: failingEngine{err: errors.New("not called")}, st: actorlb.Stats{Ready: true}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := NewServer(Config{Engine: eng, Log: logrus.NewEntry(log)})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `actorlb_build_info{goversion="`+b.GoVersion+`",modified="false",revision="`+b.Revision+`",version="`+b.Version+`"} 1`)
}

func TestBuildInfoString(t *testing.T) {
	b := BuildInfo{Version: "v1.2.0", Revision: "0123456789abcdef0123", Modified: true, GoVersion: "go1.26.0"}
	require.Equal(t, "v1.2.0, revision 0123456789ab+dirty, go1.26.0", b.String())
	b = BuildInfo{Version: "(devel)", GoVersion: "go1.26.0"}
	require.Equal(t, "(devel), revision unknown (built without VCS information), go1.26.0", b.String())
}
