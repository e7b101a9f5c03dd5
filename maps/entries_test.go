package maps

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEntriesOfReadsTheSliceInOrder(t *testing.T) {
	es := []BackendEntry{{ID: 3}, {ID: 1}, {ID: 2}}
	l := EntriesOf(es)
	require.Equal(t, 3, l.Len())
	require.Equal(t, es, l.Slice())
	var ids []uint32
	for e := range l.All() {
		ids = append(ids, e.ID)
		if len(ids) == 2 {
			break
		}
	}
	require.Equal(t, []uint32{3, 1}, ids, "All stops where the reader does")
}

func TestEmptyEntriesReadNothing(t *testing.T) {
	for name, l := range map[string]Entries[BackendEntry]{"zero": {}, "of nil": EntriesOf[BackendEntry](nil)} {
		require.Zero(t, l.Len(), name)
		for range l.All() {
			t.Fatalf("%s: an entry", name)
		}
		got := l.Slice()
		require.NotNil(t, got, name)
		require.Empty(t, got, name)
	}
}
