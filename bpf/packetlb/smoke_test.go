package packetlb

import (
	"errors"
	"strings"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

func TestSmokeLoad(t *testing.T) {
	root := testutil.PinDir(t)
	m, err := maps.Open(maps.Config{Root: root})
	require.NoError(t, err)
	defer m.Close()
	coll, err := load(root, 0)
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		n := len(ve.Log)
		t.Fatal(strings.Join(ve.Log[max(0, n-40):], "\n"))
	}
	require.NoError(t, err)
	coll.Close()
}
