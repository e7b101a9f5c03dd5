package idalloc_test

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/actorlb/actorlb/internal/idalloc"
	"github.com/actorlb/actorlb/internal/pagedindex"
)

// model is a deliberately naive reference: a plain table of id -> owner,
// scanned linearly.
type model struct {
	max    int
	owner  []string // owner[id], "" if none; index 0 unused
	refs   []uint32
	held   []bool
	cursor int
}

func newModel(max int) *model {
	return &model{
		max:    max,
		owner:  make([]string, max+1),
		refs:   make([]uint32, max+1),
		held:   make([]bool, max+1),
		cursor: 1,
	}
}

func (m *model) idOf(key string) int {
	for id := 1; id <= m.max; id++ {
		if m.owner[id] == key {
			return id
		}
	}
	return 0
}

func (m *model) inRange(id int) bool { return id >= 1 && id <= m.max }

func (m *model) acquire(key string) (int, bool, error) {
	if id := m.idOf(key); id != 0 {
		m.refs[id]++
		return id, false, nil
	}
	for i := range m.max {
		id := (m.cursor-1+i)%m.max + 1
		if m.owner[id] == "" && !m.held[id] {
			m.owner[id], m.refs[id] = key, 1
			m.cursor = id%m.max + 1
			return id, true, nil
		}
	}
	return 0, false, idalloc.ErrIDSpaceExhausted
}

// claimCheck is the error check shared by acquireID and restore.
func (m *model) claimCheck(key string, id int) error {
	switch {
	case !m.inRange(id):
		return idalloc.ErrIDOutOfRange
	case m.owner[id] != "" && m.owner[id] != key:
		return idalloc.ErrIDInUse
	case m.owner[id] == key:
		return nil
	case m.idOf(key) != 0:
		return idalloc.ErrKeyBound
	case m.held[id]:
		return idalloc.ErrIDHeld
	}
	return nil
}

func (m *model) acquireID(key string, id int) (bool, error) {
	if err := m.claimCheck(key, id); err != nil {
		return false, err
	}
	if m.owner[id] == key {
		m.refs[id]++
		return false, nil
	}
	m.owner[id], m.refs[id] = key, 1
	return true, nil
}

func (m *model) restore(key string, id int) error {
	if err := m.claimCheck(key, id); err != nil {
		return err
	}
	if m.owner[id] != key {
		m.owner[id], m.refs[id] = key, 0
	}
	return nil
}

func (m *model) release(key string) (int, bool, error) {
	id := m.idOf(key)
	if id == 0 || m.refs[id] == 0 {
		return 0, false, idalloc.ErrNotFound
	}
	m.refs[id]--
	if m.refs[id] == 0 {
		m.owner[id] = ""
		return id, true, nil
	}
	return id, false, nil
}

func (m *model) drop(key string) error {
	id := m.idOf(key)
	switch {
	case id == 0:
		return idalloc.ErrNotFound
	case m.refs[id] > 0:
		return idalloc.ErrIDInUse
	}
	m.owner[id] = ""
	return nil
}

func (m *model) hold(id int) error {
	switch {
	case !m.inRange(id):
		return idalloc.ErrIDOutOfRange
	case m.owner[id] != "":
		return idalloc.ErrIDInUse
	}
	m.held[id] = true
	return nil
}

func (m *model) lease(n int) []uint16 {
	var out []uint16
	for len(out) < n {
		found := false
		for i := range m.max {
			id := (m.cursor-1+i)%m.max + 1
			if m.owner[id] == "" && !m.held[id] {
				m.held[id] = true
				out = append(out, uint16(id))
				m.cursor = id%m.max + 1
				found = true
				break
			}
		}
		if !found {
			break
		}
	}
	return out
}

func (m *model) claim(key string, id int) error {
	switch {
	case !m.inRange(id):
		return idalloc.ErrIDOutOfRange
	case m.owner[id] == key && m.refs[id] > 0:
		return nil
	case m.idOf(key) != 0:
		return idalloc.ErrKeyBound
	case !m.held[id]:
		return idalloc.ErrNotLeased
	}
	m.held[id] = false
	m.owner[id], m.refs[id] = key, 1
	return nil
}

func (m *model) unhold(id int) {
	if m.inRange(id) {
		m.held[id] = false
	}
}

func (m *model) bindings() []idalloc.Binding[string, uint16] {
	var out []idalloc.Binding[string, uint16]
	for id := 1; id <= m.max; id++ {
		if m.owner[id] != "" {
			out = append(out, idalloc.Binding[string, uint16]{Key: m.owner[id], ID: uint16(id), Refs: m.refs[id]})
		}
	}
	return out
}

func testSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if s := os.Getenv("TEST_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "TEST_SEED")
		seed = v
	}
	t.Logf("TEST_SEED=%d", seed)
	return seed
}

// outcomes counts results by kind so the log shows what a seed exercised.
var outcomes map[string]int

func sameErr(t *testing.T, want, got error, step int, what string) {
	t.Helper()
	kind := "ok"
	if want != nil {
		kind = want.Error()
	}
	outcomes[kind]++
	if want == nil {
		require.NoError(t, got, "step %d: %s", step, what)
		return
	}
	require.ErrorIs(t, got, want, "step %d: %s", step, what)
}

// TestAgainstModel runs a few thousand random operations on a small space
// (so that exhaustion, wrap-around, conflicts and holds are frequent) and
// compares every result and the whole state with the reference model.
func TestAgainstModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32))
	outcomes = map[string]int{}
	defer func() { t.Logf("outcomes: %v", outcomes) }()

	for round := range 9 {
		max := 1 + rng.IntN(24)
		nkeys := 1 + rng.IntN(2*max+2)
		if round%3 == 2 { // most keys in one range, room for them all: pages
			max, nkeys = 40+rng.IntN(40), 30+rng.IntN(30)
		}
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		a := idalloc.New[string, uint16](uint16(max))
		switch round % 3 {
		case 1: // the same with some keys packed
			a = idalloc.NewCompact[string, uint16](uint16(max), 0, shortKeys{})
		case 2: // the same with most keys in runs, the rest packed
			a = idalloc.NewRuns[string, uint16](uint16(max), 0, numberedKeys, shortKeys{})
		}
		m := newModel(max)
		key := func() string { return keys[rng.IntN(len(keys))] }
		id := func() int { return rng.IntN(max + 2) } // includes 0 and max+1

		for step := range 2000 {
			var what string
			acquires := 30
			if round%3 == 2 && step >= 1000 {
				acquires = 10 // releases win: pages go loose again
			}
			switch r := rng.IntN(100); {
			case r < acquires:
				k := key()
				what = "Acquire(" + k + ")"
				wid, wc, werr := m.acquire(k)
				gid, gc, gerr := a.Acquire(k)
				sameErr(t, werr, gerr, step, what)
				require.Equal(t, wid, int(gid), "step %d: %s", step, what)
				require.Equal(t, wc, gc, "step %d: %s", step, what)
			case r < 55:
				k := key()
				what = "Release(" + k + ")"
				wid, wf, werr := m.release(k)
				gid, gf, gerr := a.Release(k)
				sameErr(t, werr, gerr, step, what)
				require.Equal(t, wid, int(gid), "step %d: %s", step, what)
				require.Equal(t, wf, gf, "step %d: %s", step, what)
			case r < 65:
				k, i := key(), id()
				what = "AcquireID(" + k + "," + strconv.Itoa(i) + ")"
				wc, werr := m.acquireID(k, i)
				gc, gerr := a.AcquireID(k, uint16(i))
				sameErr(t, werr, gerr, step, what)
				require.Equal(t, wc, gc, "step %d: %s", step, what)
			case r < 78:
				k, i := key(), id()
				what = "Restore(" + k + "," + strconv.Itoa(i) + ")"
				sameErr(t, m.restore(k, i), a.Restore(k, uint16(i)), step, what)
			case r < 85:
				k := key()
				what = "DropReservation(" + k + ")"
				sameErr(t, m.drop(k), a.DropReservation(k), step, what)
			case r < 91:
				i := id()
				what = "Hold(" + strconv.Itoa(i) + ")"
				sameErr(t, m.hold(i), a.Hold(uint16(i)), step, what)
			case r < 95:
				n := rng.IntN(4)
				what = "Lease(" + strconv.Itoa(n) + ")"
				require.Equal(t, m.lease(n), a.Lease(n), "step %d: %s", step, what)
			case r < 97:
				k, i := key(), id()
				for j := 1; j <= max && rng.IntN(2) == 0; j++ { // a leased ID, most often
					if m.held[j] {
						i = j
					}
				}
				what = "Claim(" + k + "," + strconv.Itoa(i) + ")"
				sameErr(t, m.claim(k, i), a.Claim(k, uint16(i)), step, what)
			default:
				i := id()
				what = "Unhold(" + strconv.Itoa(i) + ")"
				m.unhold(i)
				a.Unhold(uint16(i))
			}

			want := m.bindings()
			requireBindings(t, want, a.Bindings(), "round %d step %d: after %s", round, step, what)
			require.Equal(t, len(want), a.Len())
			unclaimed := slices.DeleteFunc(slices.Clone(want), func(b idalloc.Binding[string, uint16]) bool { return b.Refs > 0 })
			requireBindings(t, unclaimed, a.Unclaimed(), "round %d step %d: unclaimed after %s", round, step, what)
			for i := 1; i <= max; i++ {
				require.Equal(t, m.held[i], a.Held(uint16(i)), "held %d", i)
			}
			checkInvariants(t, a)
		}
	}
}

// shortKeys packs the keys of two bytes ("k0" to "k9") into their digit
// (a Packer for tests).
type shortKeys struct{}

func (shortKeys) Pack(k string) (uint64, bool) {
	return uint64(k[len(k)-1]), len(k) == 2
}

func (shortKeys) Unpack(p uint64) string { return "k" + string(rune(p)) }

// numberedKeys puts the keys "k10" and up in runs (their number the run
// key): the ranges of pagedindex.Packed get pages and lose them as keys
// come and go; "k0" to "k9" are packed (shortKeys).
var numberedKeys = pagedindex.Runs[string]{
	Of: func(k string) (uint64, bool) {
		n, err := strconv.Atoi(k[1:])
		return uint64(n), err == nil && n >= 10
	},
	Back: func(r uint64) string { return "k" + strconv.Itoa(int(r)) },
}

// requireBindings compares two binding lists, nil and empty being equal.
func requireBindings(t *testing.T, want, got []idalloc.Binding[string, uint16], msg ...any) {
	t.Helper()
	if len(want) == 0 && len(got) == 0 {
		return
	}
	require.Equal(t, want, got, msg...)
}
