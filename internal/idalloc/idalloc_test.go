package idalloc_test

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorlb/actorlb/internal/idalloc"
	"github.com/actorlb/actorlb/internal/pagedindex"
)

// addr mirrors loadbalancer.L3n4Addr (32 bytes, one pointer inside
// netip.Addr) so that tests and benchmarks use a key of realistic size.
type addr struct {
	ip    netip.Addr
	port  uint16
	proto uint8
	scope uint8
}

func (a addr) String() string {
	proto := "TCP"
	if a.proto == 17 {
		proto = "UDP"
	}
	return netip.AddrPortFrom(a.ip, a.port).String() + "/" + proto
}

func tcp(s string) addr {
	ap := netip.MustParseAddrPort(s)
	return addr{ip: ap.Addr(), port: ap.Port(), proto: 6}
}

// op is one step of a scripted test against an Allocator[string, uint16].
type op struct {
	do   string // acquire, acquireID, release, restore, drop, hold, unhold
	key  string
	id   uint16 // requested id (acquireID, restore, hold, unhold)
	want uint16 // returned id (acquire, release)
	flag bool   // created (acquire, acquireID) or freed (release)
	err  error  // sentinel the error must match; nil: no error
}

func acq(key string, want uint16, created bool) op {
	return op{do: "acquire", key: key, want: want, flag: created}
}
func acqErr(key string, err error) op { return op{do: "acquire", key: key, err: err} }
func acqID(key string, id uint16, created bool) op {
	return op{do: "acquireID", key: key, id: id, flag: created}
}
func acqIDErr(key string, id uint16, err error) op {
	return op{do: "acquireID", key: key, id: id, err: err}
}
func rel(key string, want uint16, freed bool) op {
	return op{do: "release", key: key, want: want, flag: freed}
}
func relErr(key string, err error) op  { return op{do: "release", key: key, err: err} }
func restore(key string, id uint16) op { return op{do: "restore", key: key, id: id} }
func restoreErr(key string, id uint16, err error) op {
	return op{do: "restore", key: key, id: id, err: err}
}
func drop(key string, err error) op { return op{do: "drop", key: key, err: err} }
func hold(id uint16, err error) op  { return op{do: "hold", id: id, err: err} }
func unhold(id uint16) op           { return op{do: "unhold", id: id} }

func run(t *testing.T, a *idalloc.Allocator[string, uint16], ops []op) {
	t.Helper()
	for i, o := range ops {
		var (
			id   uint16
			flag bool
			err  error
		)
		switch o.do {
		case "acquire":
			id, flag, err = a.Acquire(o.key)
		case "acquireID":
			flag, err = a.AcquireID(o.key, o.id)
		case "release":
			id, flag, err = a.Release(o.key)
		case "restore":
			err = a.Restore(o.key, o.id)
		case "drop":
			err = a.DropReservation(o.key)
		case "hold":
			err = a.Hold(o.id)
		case "unhold":
			a.Unhold(o.id)
		default:
			t.Fatalf("step %d: unknown op %q", i, o.do)
		}
		desc := fmt.Sprintf("step %d: %s(%q, %d)", i, o.do, o.key, o.id)
		if o.err != nil {
			require.ErrorIs(t, err, o.err, desc)
			assert.Zero(t, id, desc)
			assert.False(t, flag, desc)
			continue
		}
		require.NoError(t, err, desc)
		assert.Equal(t, o.want, id, desc)
		assert.Equal(t, o.flag, flag, desc)
		checkInvariants(t, a)
	}
}

// checkInvariants checks what must hold after every operation: no two keys
// share an ID, every ID is in [1, max], Len, Lookup, LookupID and Bindings
// agree, and no held ID is bound.
func checkInvariants[K comparable, I idalloc.ID](t *testing.T, a *idalloc.Allocator[K, I]) {
	t.Helper()
	b := a.Bindings()
	require.Len(t, b, a.Len(), "Len matches Bindings")
	seen := make(map[I]K, len(b))
	for i, x := range b {
		require.NotZero(t, x.ID, "zero id bound to %v", x.Key)
		require.LessOrEqual(t, x.ID, a.Max(), "id out of range for %v", x.Key)
		if i > 0 {
			require.Less(t, b[i-1].ID, x.ID, "Bindings sorted by unique id")
		}
		if other, dup := seen[x.ID]; dup {
			t.Fatalf("keys %v and %v share id %d", other, x.Key, x.ID)
		}
		seen[x.ID] = x.Key
		id, refs, ok := a.Lookup(x.Key)
		require.True(t, ok)
		require.Equal(t, x.ID, id)
		require.Equal(t, x.Refs, refs)
		k, ok := a.LookupID(x.ID)
		require.True(t, ok)
		require.Equal(t, x.Key, k)
		require.False(t, a.Held(x.ID), "bound id %d is held", x.ID)
	}
}

func TestScripts(t *testing.T) {
	tests := []struct {
		name string
		max  uint16
		ops  []op
	}{
		{
			name: "max is inclusive and zero is never handed out",
			max:  3,
			ops: []op{
				acq("a", 1, true), acq("b", 2, true), acq("c", 3, true),
				acqErr("d", idalloc.ErrIDSpaceExhausted),
			},
		},
		{
			name: "rollover from max to 1 skips used ids",
			max:  5,
			ops: []op{
				acq("a", 1, true), acq("b", 2, true), acq("c", 3, true),
				acq("d", 4, true),
				rel("b", 2, true), rel("c", 3, true),
				acq("e", 5, true), // cursor keeps moving: freed ids are reused late
				acq("f", 2, true), // rolled over, skipped 1
				acq("g", 3, true),
				acqErr("h", idalloc.ErrIDSpaceExhausted),
			},
		},
		{
			name: "exhaustion, then release one and acquire gets it",
			max:  5,
			ops: []op{
				acq("a", 1, true), acq("b", 2, true), acq("c", 3, true),
				acq("d", 4, true), acq("e", 5, true),
				acqErr("f", idalloc.ErrIDSpaceExhausted),
				acqErr("f", idalloc.ErrIDSpaceExhausted),
				rel("c", 3, true),
				acq("f", 3, true),
				acqErr("g", idalloc.ErrIDSpaceExhausted),
				acq("a", 1, false), // an existing key still gets its id when full
			},
		},
		{
			name: "restore of every id: acquire fails at once",
			max:  5,
			ops: []op{
				restore("a", 1), restore("b", 2), restore("c", 3), restore("d", 4), restore("e", 5),
				acqErr("f", idalloc.ErrIDSpaceExhausted),
				acq("c", 3, false), // the owner still claims its id
				drop("a", nil),
				acq("f", 1, true),
			},
		},
		{
			name: "restored ids are reserved across wrap-around, the same key reclaims",
			max:  5,
			ops: []op{
				restore("x", 2), restore("y", 4),
				acq("a", 1, true), acq("b", 3, true), acq("c", 5, true),
				acqErr("d", idalloc.ErrIDSpaceExhausted),
				rel("a", 1, true),
				acq("d", 1, true), // wrapped to 1; 2 and 4 still reserved
				acqErr("e", idalloc.ErrIDSpaceExhausted),
				acq("x", 2, false), // claims its reservation
				acqID("y", 4, false),
				acq("x", 2, false),
				rel("x", 2, false), rel("x", 2, true),
				acq("e", 2, true),
			},
		},
		{
			name: "restore is idempotent for the same pair",
			max:  5,
			ops: []op{
				restore("a", 3), restore("a", 3),
				acq("a", 3, false),
				restore("a", 3), // claimed: still a no-op
				rel("a", 3, true),
				relErr("a", idalloc.ErrNotFound),
			},
		},
		{
			name: "restore errors",
			max:  5,
			ops: []op{
				restore("a", 3),
				restoreErr("b", 0, idalloc.ErrIDOutOfRange),
				restoreErr("b", 6, idalloc.ErrIDOutOfRange),
				restoreErr("b", 3, idalloc.ErrIDInUse),  // reserved for a
				restoreErr("a", 4, idalloc.ErrKeyBound), // same key, two ids
				acq("c", 1, true),
				restoreErr("b", 1, idalloc.ErrIDInUse), // bound to c
				restoreErr("c", 2, idalloc.ErrKeyBound),
				hold(2, nil),
				restoreErr("b", 2, idalloc.ErrIDHeld),
			},
		},
		{
			name: "acquireID",
			max:  5,
			ops: []op{
				acqID("a", 5, true),
				acqID("a", 5, false), // refcount 2
				acqIDErr("b", 0, idalloc.ErrIDOutOfRange),
				acqIDErr("b", 6, idalloc.ErrIDOutOfRange),
				acqIDErr("b", 5, idalloc.ErrIDInUse),
				acqIDErr("a", 4, idalloc.ErrKeyBound),
				restore("r", 2),
				acqIDErr("b", 2, idalloc.ErrIDInUse), // reserved for r
				acqIDErr("r", 3, idalloc.ErrKeyBound),
				hold(3, nil),
				acqIDErr("b", 3, idalloc.ErrIDHeld),
				acq("b", 1, true), // cursor untouched by AcquireID
				acq("c", 4, true), // skips reserved 2 and held 3
				rel("a", 5, false), rel("a", 5, true),
			},
		},
		{
			name: "refcounts: one id, two releases to free",
			max:  5,
			ops: []op{
				acq("a", 1, true), acq("a", 1, false),
				rel("a", 1, false), rel("a", 1, true),
				relErr("a", idalloc.ErrNotFound),
				acq("a", 2, true), // cursor moved on: 1 is not reused first
			},
		},
		{
			name: "release errors",
			max:  5,
			ops: []op{
				relErr("nope", idalloc.ErrNotFound),
				restore("r", 1),
				relErr("r", idalloc.ErrNotFound), // reserved, never claimed
			},
		},
		{
			name: "unclaimed reservations and DropReservation",
			max:  5,
			ops: []op{
				restore("a", 4), restore("b", 2), restore("c", 3),
				acq("c", 3, false),
				drop("c", idalloc.ErrIDInUse), // claimed
				drop("zzz", idalloc.ErrNotFound),
				drop("b", nil),
				drop("b", idalloc.ErrNotFound),
				acq("d", 1, true), acq("e", 2, true), // 2 is free again
				acq("f", 5, true),
				acqErr("g", idalloc.ErrIDSpaceExhausted),
			},
		},
		{
			name: "hold and unhold",
			max:  3,
			ops: []op{
				acq("a", 1, true), rel("a", 1, true),
				hold(1, nil), hold(1, nil), // idempotent
				acq("b", 2, true), acq("c", 3, true),
				acqErr("d", idalloc.ErrIDSpaceExhausted), // 1 held: skipped
				acqIDErr("d", 1, idalloc.ErrIDHeld),
				hold(2, idalloc.ErrIDInUse), // bound
				hold(0, idalloc.ErrIDOutOfRange),
				hold(4, idalloc.ErrIDOutOfRange),
				unhold(1), unhold(1), unhold(2), // unholding a free or bound id is a no-op
				acq("d", 1, true),
				rel("b", 2, true),
				hold(2, nil),
				acqErr("e", idalloc.ErrIDSpaceExhausted),
				unhold(2),
				acqID("e", 2, true),
			},
		},
		{
			name: "hold refuses a reserved id",
			max:  3,
			ops: []op{
				restore("a", 2),
				hold(2, idalloc.ErrIDInUse),
				drop("a", nil),
				hold(2, nil),
				acq("b", 1, true), acq("c", 3, true),
				acqErr("d", idalloc.ErrIDSpaceExhausted),
			},
		},
		{
			name: "empty space",
			max:  0,
			ops: []op{
				acqErr("a", idalloc.ErrIDSpaceExhausted),
				acqIDErr("a", 1, idalloc.ErrIDOutOfRange),
				restoreErr("a", 1, idalloc.ErrIDOutOfRange),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, idalloc.New[string](tt.max), tt.ops)
		})
		t.Run(tt.name+"/keys in runs", func(t *testing.T) {
			run(t, idalloc.NewRuns[string, uint16](tt.max, 0, letterKeys, nil), tt.ops)
		})
	}
}

// letterKeys puts the keys of one letter in runs (the letter the run key).
var letterKeys = pagedindex.Runs[string]{
	Of:   func(k string) (uint64, bool) { return uint64(k[0]), len(k) == 1 },
	Back: func(r uint64) string { return string(rune(r)) },
}

func TestLookupLenBindings(t *testing.T) {
	a := idalloc.New[string, uint16](10)
	_, _, ok := a.Lookup("a")
	assert.False(t, ok)
	_, ok = a.LookupID(1)
	assert.False(t, ok)
	assert.Equal(t, 0, a.Len())
	assert.Empty(t, a.Bindings())
	assert.Empty(t, a.Unclaimed())

	require.NoError(t, a.Restore("r7", 7))
	require.NoError(t, a.Restore("r3", 3))
	require.NoError(t, a.Restore("r5", 5))
	_, err := a.AcquireID("b", 9)
	require.NoError(t, err)
	mustAcquire(t, a, "a", 1)
	mustAcquire(t, a, "a", 1)
	mustAcquire(t, a, "r5", 5)
	require.NoError(t, a.Hold(2))

	assert.Equal(t, 5, a.Len(), "bound and reserved, not held")
	assert.Equal(t, []idalloc.Binding[string, uint16]{
		{Key: "a", ID: 1, Refs: 2},
		{Key: "r3", ID: 3, Refs: 0},
		{Key: "r5", ID: 5, Refs: 1},
		{Key: "r7", ID: 7, Refs: 0},
		{Key: "b", ID: 9, Refs: 1},
	}, a.Bindings())
	assert.Equal(t, []idalloc.Binding[string, uint16]{
		{Key: "r3", ID: 3},
		{Key: "r7", ID: 7},
	}, a.Unclaimed())

	id, refs, ok := a.Lookup("r3")
	assert.True(t, ok)
	assert.Equal(t, uint16(3), id)
	assert.Equal(t, uint32(0), refs)
	k, ok := a.LookupID(7)
	assert.True(t, ok)
	assert.Equal(t, "r7", k)
	_, ok = a.LookupID(2)
	assert.False(t, ok, "a held id has no owner")
	assert.True(t, a.Held(2))
	assert.False(t, a.Held(4))
	checkInvariants(t, a)

	for _, u := range a.Unclaimed() {
		require.NoError(t, a.DropReservation(u.Key))
	}
	assert.Empty(t, a.Unclaimed())
	assert.Equal(t, 3, a.Len())
}

func mustAcquire[K comparable, I idalloc.ID](t *testing.T, a *idalloc.Allocator[K, I], key K, want I) {
	t.Helper()
	id, _, err := a.Acquire(key)
	require.NoError(t, err)
	require.Equal(t, want, id)
}

// TestUint16Boundary exercises the whole service ID space: 65535 is handed
// out, and the cursor rolls over from the largest uint16 to 1 without
// overflowing to 0.
func TestUint16Boundary(t *testing.T) {
	a := idalloc.New[int, uint16](math.MaxUint16)
	for i := 1; i <= math.MaxUint16; i++ {
		mustAcquire(t, a, i, uint16(i))
	}
	_, _, err := a.Acquire(0)
	require.ErrorIs(t, err, idalloc.ErrIDSpaceExhausted)
	_, _, err = a.Release(3)
	require.NoError(t, err)
	_, _, err = a.Release(math.MaxUint16)
	require.NoError(t, err)
	// The cursor rolled over from 65535 to 1: the first free id after it is
	// 3, then 65535 itself.
	mustAcquire(t, a, -1, 3)
	mustAcquire(t, a, -2, 65535)
	_, _, err = a.Acquire(-3)
	require.ErrorIs(t, err, idalloc.ErrIDSpaceExhausted)
	assert.Equal(t, math.MaxUint16, a.Len())
}

// TestUint32Boundary checks the top of the backend ID space without filling it.
func TestUint32Boundary(t *testing.T) {
	type backendID uint32
	a := idalloc.New[string, backendID](math.MaxUint32)
	_, err := a.AcquireID("last", math.MaxUint32)
	require.NoError(t, err)
	require.NoError(t, a.Restore("first", 1))
	mustAcquire(t, a, "x", backendID(2))
	require.NoError(t, a.Hold(math.MaxUint32-1))
	_, err = a.AcquireID("y", math.MaxUint32-1)
	require.ErrorIs(t, err, idalloc.ErrIDHeld)
	checkInvariants(t, a)

	b := idalloc.New[string, uint64](math.MaxUint64)
	_, err = b.AcquireID("top", math.MaxUint64)
	require.NoError(t, err)
	mustAcquire(t, b, "one", uint64(1))
}

// TestExhaustionLargeSpaceIsFast fills a 2^16 space of 32-bit IDs with
// restored reservations (as after a restart with a full map) and expects
// Acquire to fail at once, and to find the single free ID in one pass.
func TestExhaustionLargeSpaceIsFast(t *testing.T) {
	const max = 1 << 16
	a := idalloc.New[uint32, uint32](max)
	for id := uint32(1); id <= max; id++ {
		require.NoError(t, a.Restore(id+100, id))
	}
	for range 1000 { // would spin or scan 2^16 ids per call without the count
		_, _, err := a.Acquire(1)
		require.ErrorIs(t, err, idalloc.ErrIDSpaceExhausted)
	}
	require.NoError(t, a.DropReservation(max-1+100))
	mustAcquire(t, a, 1, uint32(max-1))
	_, _, err := a.Acquire(2)
	require.ErrorIs(t, err, idalloc.ErrIDSpaceExhausted)
}

func TestErrors(t *testing.T) {
	fe7 := tcp("10.96.0.10:80")
	fe8 := tcp("10.96.0.11:53")
	fe8.proto = 17

	newAlloc := func(t *testing.T) *idalloc.Allocator[addr, uint16] {
		a := idalloc.New[addr, uint16](100)
		_, err := a.AcquireID(fe7, 7)
		require.NoError(t, err)
		require.NoError(t, a.Restore(fe8, 8))
		return a
	}
	other := tcp("10.96.0.99:443")
	all := []error{
		idalloc.ErrIDSpaceExhausted, idalloc.ErrIDOutOfRange, idalloc.ErrIDInUse,
		idalloc.ErrKeyBound, idalloc.ErrIDHeld, idalloc.ErrNotFound, idalloc.ErrRefCountOverflow,
	}

	tests := []struct {
		name     string
		call     func(a *idalloc.Allocator[addr, uint16]) error
		sentinel error
		text     string
		conflict *idalloc.ConflictError
		keyBound *idalloc.KeyBoundError
	}{
		{
			name:     "AcquireID: id bound to another key",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, err := a.AcquireID(other, 7); return err },
			sentinel: idalloc.ErrIDInUse,
			text:     "id 7 is bound to 10.96.0.10:80/TCP",
			conflict: &idalloc.ConflictError{ID: 7, Key: fe7},
		},
		{
			name:     "AcquireID: id reserved for another key",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, err := a.AcquireID(other, 8); return err },
			sentinel: idalloc.ErrIDInUse,
			text:     "id 8 is reserved for 10.96.0.11:53/UDP",
			conflict: &idalloc.ConflictError{ID: 8, Key: fe8, Reserved: true},
		},
		{
			name:     "AcquireID: key bound to another id",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, err := a.AcquireID(fe7, 9); return err },
			sentinel: idalloc.ErrKeyBound,
			text:     "key 10.96.0.10:80/TCP is already bound to id 7",
			keyBound: &idalloc.KeyBoundError{Key: fe7, ID: 7},
		},
		{
			name:     "AcquireID: key reserved to another id",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, err := a.AcquireID(fe8, 9); return err },
			sentinel: idalloc.ErrKeyBound,
			text:     "key 10.96.0.11:53/UDP already has id 8 reserved",
			keyBound: &idalloc.KeyBoundError{Key: fe8, ID: 8, Reserved: true},
		},
		{
			name:     "AcquireID: zero",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, err := a.AcquireID(other, 0); return err },
			sentinel: idalloc.ErrIDOutOfRange,
			text:     "id out of range: 0 not in [1, 100]",
		},
		{
			name:     "AcquireID: above max",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, err := a.AcquireID(other, 101); return err },
			sentinel: idalloc.ErrIDOutOfRange,
			text:     "id out of range: 101 not in [1, 100]",
		},
		{
			name: "AcquireID: held",
			call: func(a *idalloc.Allocator[addr, uint16]) error {
				if err := a.Hold(9); err != nil {
					return err
				}
				_, err := a.AcquireID(other, 9)
				return err
			},
			sentinel: idalloc.ErrIDHeld,
			text:     "id held: id 9 (its previous owner's map entries are being deleted)",
		},
		{
			name:     "Restore: id bound to another key",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.Restore(other, 7) },
			sentinel: idalloc.ErrIDInUse,
			text:     "id 7 is bound to 10.96.0.10:80/TCP",
			conflict: &idalloc.ConflictError{ID: 7, Key: fe7},
		},
		{
			name:     "Restore: two frontends with one id",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.Restore(other, 8) },
			sentinel: idalloc.ErrIDInUse,
			text:     "id 8 is reserved for 10.96.0.11:53/UDP",
			conflict: &idalloc.ConflictError{ID: 8, Key: fe8, Reserved: true},
		},
		{
			name:     "Restore: one frontend with two ids",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.Restore(fe8, 10) },
			sentinel: idalloc.ErrKeyBound,
			text:     "key 10.96.0.11:53/UDP already has id 8 reserved",
			keyBound: &idalloc.KeyBoundError{Key: fe8, ID: 8, Reserved: true},
		},
		{
			name:     "Restore: out of range",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.Restore(other, 1000) },
			sentinel: idalloc.ErrIDOutOfRange,
			text:     "id out of range: 1000 not in [1, 100]",
		},
		{
			name: "Acquire: exhausted",
			call: func(a *idalloc.Allocator[addr, uint16]) error {
				if err := a.Hold(1); err != nil {
					return err
				}
				for i := range 97 {
					if _, _, err := a.Acquire(addr{port: uint16(i)}); err != nil {
						return err
					}
				}
				_, _, err := a.Acquire(other)
				return err
			},
			sentinel: idalloc.ErrIDSpaceExhausted,
			text:     "id space exhausted: all 100 ids are bound, reserved or held (1 held)",
		},
		{
			name:     "Release: unknown key",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, _, err := a.Release(other); return err },
			sentinel: idalloc.ErrNotFound,
			text:     "not found: key 10.96.0.99:443/TCP",
		},
		{
			name:     "Release: unclaimed reservation",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { _, _, err := a.Release(fe8); return err },
			sentinel: idalloc.ErrNotFound,
			text:     "not found: key 10.96.0.11:53/UDP has only the unclaimed reservation of id 8",
		},
		{
			name:     "DropReservation: unknown key",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.DropReservation(other) },
			sentinel: idalloc.ErrNotFound,
			text:     "not found: key 10.96.0.99:443/TCP",
		},
		{
			name:     "DropReservation: claimed",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.DropReservation(fe7) },
			sentinel: idalloc.ErrIDInUse,
			text:     "id 7 is bound to 10.96.0.10:80/TCP",
			conflict: &idalloc.ConflictError{ID: 7, Key: fe7},
		},
		{
			name:     "Hold: bound",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.Hold(7) },
			sentinel: idalloc.ErrIDInUse,
			text:     "id 7 is bound to 10.96.0.10:80/TCP",
			conflict: &idalloc.ConflictError{ID: 7, Key: fe7},
		},
		{
			name:     "Hold: reserved",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.Hold(8) },
			sentinel: idalloc.ErrIDInUse,
			text:     "id 8 is reserved for 10.96.0.11:53/UDP",
			conflict: &idalloc.ConflictError{ID: 8, Key: fe8, Reserved: true},
		},
		{
			name:     "Hold: out of range",
			call:     func(a *idalloc.Allocator[addr, uint16]) error { return a.Hold(0) },
			sentinel: idalloc.ErrIDOutOfRange,
			text:     "id out of range: 0 not in [1, 100]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAlloc(t)
			before := a.Bindings()
			err := tt.call(a)
			require.Error(t, err)
			assert.EqualError(t, err, tt.text)
			for _, s := range all {
				assert.Equal(t, s == tt.sentinel, errors.Is(err, s), "errors.Is(err, %v)", s)
			}
			var ce *idalloc.ConflictError
			if assert.Equal(t, tt.conflict != nil, errors.As(err, &ce)) && tt.conflict != nil {
				assert.Equal(t, tt.conflict, ce)
			}
			var kb *idalloc.KeyBoundError
			if assert.Equal(t, tt.keyBound != nil, errors.As(err, &kb)) && tt.keyBound != nil {
				assert.Equal(t, tt.keyBound, kb)
			}
			// Wrapped by the caller, the typed errors still match.
			wrapped := fmt.Errorf("service: %w", err)
			assert.ErrorIs(t, wrapped, tt.sentinel)
			if tt.sentinel != idalloc.ErrIDSpaceExhausted {
				assert.Equal(t, before, a.Bindings(), "a failed call changes nothing")
			}
			checkInvariants(t, a)
		})
	}
}

// TestCallerMessage shows the fields the engine uses to build its own text.
func TestCallerMessage(t *testing.T) {
	a := idalloc.New[addr, uint16](math.MaxUint16)
	fe := tcp("10.96.0.10:80")
	_, err := a.AcquireID(fe, 7)
	require.NoError(t, err)
	_, err = a.AcquireID(tcp("10.96.0.12:80"), 7)
	var ce *idalloc.ConflictError
	require.ErrorAs(t, err, &ce)
	msg := fmt.Sprintf("service ID %d is already registered to %v", ce.ID, ce.Key)
	assert.Equal(t, "service ID 7 is already registered to 10.96.0.10:80/TCP", msg)
	assert.Equal(t, fe, ce.Key.(addr))
}
