package enginetest_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/enginetest"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// With sets the hooks of an actorlb.Config from outside package actorlb:
// the engine hands its maps to Maps and consults Fault on every map call.
func TestWithSetsTheHooksOfAConfig(t *testing.T) {
	var seen *maps.LBMaps
	log := logrus.New()
	log.SetLevel(logrus.PanicLevel)
	cfg := enginetest.With(actorlb.Config{InMemory: true, Logger: log}, enginetest.Hooks{
		Maps: func(m *maps.LBMaps) { seen = m },
		Fault: func(name string, op maps.Op, _ uint64, _ int) error {
			if name == maps.Service4Name && op == maps.OpUpdate {
				return syscall.EBUSY
			}
			return nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := actorlb.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	require.NotNil(t, seen, "Maps hook called before New returned")

	fe, err := lb.ParseL3n4Addr("10.96.0.10:80")
	require.NoError(t, err)
	_, _, err = e.Upsert(ctx, &lb.Service{Frontend: lb.Frontend{L3n4Addr: fe}})
	require.ErrorIs(t, err, syscall.EBUSY, "the fault reached the service map")
	es, err := seen.Service4.Dump()
	require.NoError(t, err)
	require.Empty(t, es)
}

// With refuses anything but an actorlb.Config, naming the type.
func TestWithRefusesOtherTypes(t *testing.T) {
	require.PanicsWithValue(t, "enginetest: with hooks: *actorlb.Config is not an actorlb.Config", func() {
		enginetest.With(&actorlb.Config{}, enginetest.Hooks{})
	})
}
