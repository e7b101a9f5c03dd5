package maps

import (
	"net/netip"

	"github.com/actorlb/actorlb/internal/testutil"
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
	var chunks [][]BackendEntry
	for c := range l.Chunks(nil) {
		chunks = append(chunks, c)
	}
	require.Equal(t, [][]BackendEntry{es}, chunks, "one chunk: the slice itself")
}

func TestEmptyEntriesReadNothing(t *testing.T) {
	for name, l := range map[string]Entries[BackendEntry]{"zero": {}, "of nil": EntriesOf[BackendEntry](nil)} {
		require.Zero(t, l.Len(), name)
		for range l.All() {
			t.Fatalf("%s: an entry", name)
		}
		for range l.Chunks(nil) {
			t.Fatalf("%s: a chunk", name)
		}
		got := l.Slice()
		require.NotNil(t, got, name)
		require.Empty(t, got, name)
	}
}

// decodeOver decodes k, v into a zero entry and into one every field of
// which holds something else, and requires both to give the same entry:
// a decoder that skipped a field would leave the chunk buffer's last
// entry there.
func decodeOver[E, K, V any](t *testing.T, name string, decode func(*E, *K, *V), other E, k K, v V) {
	t.Helper()
	var fresh E
	decode(&fresh, &k, &v)
	reused := other
	decode(&reused, &k, &v)
	require.Equal(t, fresh, reused, "%s: every field written", name)
}

func TestDecodersWriteEveryField(t *testing.T) {
	r := testutil.Rand(t)
	bytes := func(b []byte) {
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
	}
	svcOther := ServiceEntry{
		Key:   ServiceKey{Address: netip.MustParseAddr("2001:db8::1"), Port: 1, Slot: 2, Proto: 3, Scope: 4},
		Value: ServiceValue{BackendID: 5, Count: 6, RevNATIndex: 7, Flags: 8, Flags2: 9, QCount: 10},
	}
	beOther := BackendEntry{ID: 11, Value: BackendValue{Address: netip.MustParseAddr("2001:db8::2"), Port: 12, Proto: 13, State: 14, ClusterID: 15, Zone: 16}}
	for range 100 {
		var k4, v [12]byte
		var k6 [24]byte
		var bk [4]byte
		var b6 [24]byte
		bytes(k4[:])
		bytes(v[:])
		bytes(k6[:])
		bytes(bk[:])
		bytes(b6[:])
		decodeOver(t, "service4", service4Codec.decode, svcOther, k4, v)
		decodeOver(t, "service6", service6Codec.decode, svcOther, k6, v)
		decodeOver(t, "backend4", backend4Codec.decode, beOther, bk, v)
		decodeOver(t, "backend6", backend6Codec.decode, beOther, bk, b6)
	}
}
