package maps

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Op names a map operation, for fault injection and statistics.
type Op uint8

const (
	OpUpdate Op = iota + 1
	OpDelete
	OpDump
	OpLookup
)

func (o Op) String() string {
	switch o {
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpDump:
		return "dump"
	case OpLookup:
		return "lookup"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// rawKey and rawValue are the fixed-size byte arrays of the layouts.
// They are used as comparable fixed-size values: no pointers, no padding.
type rawKey interface{ comparable }

type rawValue interface{ comparable }

// rawBytes views a fixed-size array as bytes.
func rawBytes[T comparable](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// store is one map of raw keys and values: a kernel map, an in-memory map,
// or a decorator around either.
type store[K rawKey, V rawValue] interface {
	name() string
	maxEntries() int
	// update writes all pairs in order; on error, a prefix may be written.
	update(keys []K, values []V) error
	// delete removes the keys; missing keys are skipped, not an error.
	delete(keys []K) error
	// dump returns every entry, in no particular order.
	// dump hands every entry to chunk, a chunk at a time (chunk may keep
	// the slices). If it must start over, it calls reset first. distinct
	// reports whether the dump read each key once: a batch lookup reads a
	// hash map bucket by bucket, each bucket whole and once, and a key
	// lives in one bucket; an iteration (get-next-key) may read a key
	// again when the map changes under it.
	dump(chunk func(keys []K, values []V), reset func()) (distinct bool, err error)
	lookup(key K) (V, bool, error)
	close() error
	// pinPath, checkPin and repin: see Map.PinPath, CheckPin, Repin.
	pinPath() string
	checkPin() (PinState, error)
	repin() error
}

// memStore is the in-memory implementation: a hash map with the kernel
// map's capacity rule. It has a lock of its own because, like a kernel map,
// it may be read while its owner writes it.
type memStore[K rawKey, V rawValue] struct {
	mapName string
	max     int
	mu      sync.RWMutex
	entries map[K]V
}

func newMemStore[K rawKey, V rawValue](name string, max int) *memStore[K, V] {
	return &memStore[K, V]{mapName: name, max: max, entries: make(map[K]V)}
}

func (s *memStore[K, V]) name() string    { return s.mapName }
func (s *memStore[K, V]) maxEntries() int { return s.max }
func (s *memStore[K, V]) close() error    { return nil }

func (s *memStore[K, V]) update(keys []K, values []V) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		if _, ok := s.entries[k]; !ok && len(s.entries) >= s.max {
			return fmt.Errorf("%w after %d of %d entries", ErrMapFull, i, len(keys))
		}
		s.entries[k] = values[i]
	}
	return nil
}

func (s *memStore[K, V]) delete(keys []K) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.entries, k)
	}
	return nil
}

func (s *memStore[K, V]) dump(chunk func([]K, []V), _ func()) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]K, 0, len(s.entries))
	for k := range s.entries {
		keys = append(keys, k)
	}
	// A stable order makes dumps of the in-memory map reproducible.
	slices.SortFunc(keys, func(a, b K) int { return cmpBytes(rawBytes(&a), rawBytes(&b)) })
	values := make([]V, len(keys))
	for i, k := range keys {
		values[i] = s.entries[k]
	}
	chunk(keys, values)
	return true, nil
}

func (s *memStore[K, V]) lookup(key K) (V, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.entries[key]
	return v, ok, nil
}

func cmpBytes(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// FaultFunc decides whether the n-th call (counted from 1, per map and per
// op) of op on the named map fails, and with which error. A nil error lets
// the call through. entries is the number of entries the call carries.
// It is called from the map owners' goroutines, concurrently for different
// maps and, for one map, from the goroutine reading it for a drift check
// beside its owner's writes, so it must be safe for concurrent use.
type FaultFunc func(mapName string, op Op, n uint64, entries int) error

// faultyStore is the fault-injecting decorator. An injected fault fails the
// whole call before anything is applied.
type faultyStore[K rawKey, V rawValue] struct {
	store[K, V]
	fault  FaultFunc
	counts [OpLookup + 1]atomic.Uint64 // readers may call alongside the owner
}

func (s *faultyStore[K, V]) check(op Op, entries int) error {
	n := s.counts[op].Add(1)
	if err := s.fault(s.name(), op, n, entries); err != nil {
		return fmt.Errorf("%s #%d: %w", op, n, err)
	}
	return nil
}

func (s *faultyStore[K, V]) update(keys []K, values []V) error {
	if err := s.check(OpUpdate, len(keys)); err != nil {
		return err
	}
	return s.store.update(keys, values)
}

func (s *faultyStore[K, V]) delete(keys []K) error {
	if err := s.check(OpDelete, len(keys)); err != nil {
		return err
	}
	return s.store.delete(keys)
}

func (s *faultyStore[K, V]) dump(chunk func([]K, []V), reset func()) (bool, error) {
	if err := s.check(OpDump, 0); err != nil {
		return false, err
	}
	return s.store.dump(chunk, reset)
}

func (s *faultyStore[K, V]) lookup(key K) (V, bool, error) {
	if err := s.check(OpLookup, 1); err != nil {
		var zero V
		return zero, false, err
	}
	return s.store.lookup(key)
}
