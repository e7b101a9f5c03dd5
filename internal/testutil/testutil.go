package testutil

import (
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/bpffs"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// RequirePrivilegedEnv names the variable that turns privilege skips into
// failures (set by .ci/run).
const RequirePrivilegedEnv = "ACTORLB_REQUIRE_PRIVILEGED"

var probe struct {
	once sync.Once
	err  error
}

// probeKernel reports, once per process, why real BPF maps and bpffs
// cannot be used (nil if they can).
func probeKernel() error {
	probe.once.Do(func() {
		_ = rlimit.RemoveMemlock()
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			probe.err = err
			return
		}
		m.Close()
		probe.err = bpffs.Ensure(bpffs.DefaultMount)
	})
	return probe.err
}

// Privileged skips tb unless it can create real BPF maps; with
// ACTORLB_REQUIRE_PRIVILEGED=1 it fails tb instead of skipping.
func Privileged(tb testing.TB) {
	tb.Helper()
	err := probeKernel()
	if err == nil {
		return
	}
	if os.Getenv(RequirePrivilegedEnv) == "1" {
		tb.Fatalf("privileged test cannot run: %v (%s=1 forbids skipping)", err, RequirePrivilegedEnv)
	}
	tb.Skipf("privileged test skipped: %v (run as root; set %s=1 to fail instead)", err, RequirePrivilegedEnv)
}

// KernelMaps reports whether tb can use real BPF maps pinned on bpffs. When
// it cannot, it returns false and logs why, so that tb runs on in-memory
// maps instead; with ACTORLB_REQUIRE_PRIVILEGED=1 it fails tb rather than
// fall back.
func KernelMaps(tb testing.TB) bool {
	tb.Helper()
	err := probeKernel()
	if err == nil {
		return true
	}
	if os.Getenv(RequirePrivilegedEnv) == "1" {
		tb.Fatalf("kernel maps unavailable: %v (%s=1 forbids falling back to in-memory maps)", err, RequirePrivilegedEnv)
	}
	tb.Logf("in-memory maps: kernel maps unavailable: %v (run as root for kernel maps; set %s=1 to fail instead)", err, RequirePrivilegedEnv)
	return false
}

// PinDir returns a fresh directory on bpffs for tb's pins, removed with
// everything pinned in it when tb ends.
func PinDir(tb testing.TB) string {
	tb.Helper()
	Privileged(tb)
	dir, err := os.MkdirTemp(bpffs.DefaultMount, "actorlb-test-")
	if err != nil {
		tb.Fatalf("create pin dir: %v", err)
	}
	tb.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("remove pin dir %s: %v", dir, err)
		}
	})
	return dir
}

// Seed returns the seed for tb's randomness: TEST_SEED if set, else the
// clock. It logs it so a failure can be replayed.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("TEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	tb.Logf("TEST_SEED=%d", seed)
	return seed
}

// Rand returns a generator seeded with Seed(tb). It is not safe for
// concurrent use: give each goroutine its own, derived from this one.
func Rand(tb testing.TB) *rand.Rand {
	tb.Helper()
	seed := Seed(tb)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// MapUnderTest is a map implementation a test checks against a Go map
// (MatchesAMap).
type MapUnderTest[K comparable, V any] struct {
	Get    func(K) (V, bool)
	Set    func(K, V)
	Delete func(K)
	Len    func() int
	All    func(yield func(K, V) bool)
}

// MatchesAMap drives m through steps random operations on keys: a delete
// (one in three) or a set of val(); after each, a get of that key must
// agree with a Go map driven alike, and every checkEvery steps (and at
// the end) its length and all its entries, each yielded once. It returns
// the Go map.
func MatchesAMap[K comparable, V any](tb testing.TB, r *rand.Rand, steps, checkEvery int, keys []K, val func() V, m MapUnderTest[K, V]) map[K]V {
	tb.Helper()
	want := map[K]V{}
	check := func(step int) {
		tb.Helper()
		if got := m.Len(); got != len(want) {
			tb.Fatalf("step %d: %d entries, want %d", step, got, len(want))
		}
		all := map[K]V{}
		for k, v := range m.All {
			if _, dup := all[k]; dup {
				tb.Fatalf("step %d: %v yielded twice", step, k)
			}
			all[k] = v
		}
		if !reflect.DeepEqual(all, want) {
			tb.Fatalf("step %d: the entries differ from the map's", step)
		}
	}
	for step := range steps {
		k := keys[r.IntN(len(keys))]
		if r.IntN(3) == 0 {
			m.Delete(k)
			delete(want, k)
		} else {
			v := val()
			m.Set(k, v)
			want[k] = v
		}
		got, ok := m.Get(k)
		w, wok := want[k]
		if ok != wok || !reflect.DeepEqual(got, w) {
			tb.Fatalf("step %d: %v: got %v, %v; want %v, %v", step, k, got, ok, w, wok)
		}
		if step%checkEvery == checkEvery-1 {
			check(step)
		}
	}
	check(steps)
	return want
}
