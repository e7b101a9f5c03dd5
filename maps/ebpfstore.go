package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// dumpChunk is the number of entries asked for per batch lookup.
const dumpChunk = 4096

// dumpYield runs after each chunk of a dump but the last: it lets the
// goroutines waiting for a processor run. A goroutine in a system call
// keeps its processor, and the runtime takes it back only on its monitor's
// tick, which grows to 10 ms; a dump is one batch lookup of about a
// millisecond after another. As an engine starts, every map owner loads
// its mirror at once, and on two cores the owners of the two largest maps
// (services, backends) kept both processors until their dumps were done:
// the small maps' owners waited runnable 25-36 ms behind them (a runtime
// trace of a new-process restore of 10k services of 10 backends), and the
// restore's loading, which starts once the dumps it reads are in, with
// them. Tests replace it to count the yields.
var dumpYield = runtime.Gosched

// flat hands cilium/ebpf a slice of raw keys or values (byte arrays: no
// padding, no pointers) as the bytes they are. It marshals an
// encoding.BinaryMarshaler without reflection; given the slice itself it
// checked the element type by reflection on every call, which cost more
// than the system call for small batches.
type flat[T comparable] []T

// MarshalBinary returns the elements' memory, not a copy.
func (f flat[T]) MarshalBinary() ([]byte, error) {
	if len(f) == 0 {
		return []byte{}, nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*int(unsafe.Sizeof(f[0]))), nil
}

// ebpfStore is a kernel BPF hash map accessed through cilium/ebpf.
type ebpfStore[K rawKey, V rawValue] struct {
	m       *ebpf.Map
	mapName string
	path    string     // where it is pinned
	id      ebpf.MapID // the kernel's ID of m, to recognise its pin
	// batch is false when the kernel refused the batch API (or the caller
	// asked for per-element operations); then every call goes per element.
	batch atomic.Bool
}

func (s *ebpfStore[K, V]) name() string    { return s.mapName }
func (s *ebpfStore[K, V]) maxEntries() int { return int(s.m.MaxEntries()) }
func (s *ebpfStore[K, V]) close() error    { return s.m.Close() }

func (s *ebpfStore[K, V]) update(keys []K, values []V) error {
	if len(keys) == 0 {
		return nil
	}
	if s.batch.Load() {
		n, err := s.m.BatchUpdate(flat[K](keys), flat[V](values), nil)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return mapError(err, n, len(keys))
		}
		s.batch.Store(false)
	}
	for i := range keys {
		if err := s.m.Update(flat[K](keys[i:i+1]), flat[V](values[i:i+1]), ebpf.UpdateAny); err != nil {
			return mapError(err, i, len(keys))
		}
	}
	return nil
}

func (s *ebpfStore[K, V]) delete(keys []K) error {
	if s.batch.Load() {
		for rest := keys; len(rest) > 0; {
			n, err := s.m.BatchDelete(flat[K](rest), nil)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, ebpf.ErrKeyNotExist):
				// The kernel stops at the first missing key: skip it.
				rest = rest[min(n+1, len(rest)):]
			case errors.Is(err, ebpf.ErrNotSupported):
				s.batch.Store(false)
				return s.delete(rest)
			default:
				return mapError(err, len(keys)-len(rest)+n, len(keys))
			}
		}
		return nil
	}
	for i := range keys {
		if err := s.m.Delete(flat[K](keys[i : i+1])); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return mapError(err, i, len(keys))
		}
	}
	return nil
}

func (s *ebpfStore[K, V]) dump(chunk func([]K, []V), reset func()) (distinct bool, err error) {
	if s.batch.Load() {
		err := s.dumpBatch(chunk, reset)
		if err == nil || !errors.Is(err, ebpf.ErrNotSupported) {
			return err == nil, err
		}
		s.batch.Store(false)
		reset()
	}
	keys := make([]K, 0, dumpChunk)
	values := make([]V, 0, dumpChunk)
	var (
		k K
		v V
	)
	it := s.m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
		values = append(values, v)
		if len(keys) == dumpChunk {
			chunk(keys, values)
			keys, values = make([]K, 0, dumpChunk), make([]V, 0, dumpChunk)
			dumpYield()
		}
	}
	if err := it.Err(); err != nil {
		return false, fmt.Errorf("iterate: %w", err)
	}
	chunk(keys, values)
	return false, nil
}

// dumpBatch reads the map with batch lookups, each into fresh buffers
// handed on as they come.
func (s *ebpfStore[K, V]) dumpBatch(chunk func([]K, []V), reset func()) error {
	var cursor ebpf.MapBatchCursor
	n := dumpChunk
	for {
		kbuf, vbuf := make([]K, n), make([]V, n)
		got, err := s.m.BatchLookup(&cursor, kbuf, vbuf, nil)
		if got > 0 && (err == nil || errors.Is(err, ebpf.ErrKeyNotExist)) {
			chunk(kbuf[:got], vbuf[:got])
		}
		if err == nil {
			dumpYield() // more to come
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if errors.Is(err, unix.ENOSPC) {
			// A bucket holds more entries than the chunk: start over bigger.
			n *= 2
			cursor = ebpf.MapBatchCursor{}
			reset()
			continue
		}
		if err != nil {
			return err
		}
	}
}

func (s *ebpfStore[K, V]) lookup(key K) (V, bool, error) {
	var v V
	err := s.m.Lookup(&key, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return v, false, nil
	}
	return v, err == nil, err
}

// mapError turns kernel errors into the package's sentinels.
func mapError(err error, done, total int) error {
	if errors.Is(err, unix.E2BIG) {
		return fmt.Errorf("%w after %d of %d entries", ErrMapFull, done, total) // the kernel's E2BIG says "key too big for map"
	}
	return fmt.Errorf("after %d of %d entries: %w", done, total, err)
}

// openOrCreate opens the map pinned at dir/spec.Name if its shape matches
// spec, replaces it if recreate is set, and creates and pins it otherwise.
func openOrCreate(spec *ebpf.MapSpec, dir string, recreate bool) (*ebpf.Map, bool, error) {
	path := filepath.Join(dir, spec.Name)
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil:
		problem := shapeProblem(m, spec)
		if problem == "" {
			return m, false, nil
		}
		if !recreate && onlySizeDiffers(m, spec) {
			// Another capacity: migrate the entries to a map of the new
			// size and pin it in the old one's place.
			defer m.Close()
			nm, err := resize(m, spec, path)
			if err != nil {
				return nil, false, err
			}
			return nm, false, nil
		}
		m.Close()
		if !recreate {
			return nil, false, fmt.Errorf("%w: %s has %s (remove it with 'rm %s' or pass --recreate-maps / Recreate to replace it: %s)",
				ErrIncompatible, path, problem, path, lossOf(spec.Name))
		}
		if err := os.Remove(path); err != nil {
			return nil, false, fmt.Errorf("unpin %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, false, fmt.Errorf("load pinned %s: %w", path, err)
	}
	m, err = ebpf.NewMap(spec)
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, false, fmt.Errorf("pin %s: %w", path, err)
	}
	return m, true, nil
}

func shapeProblem(m *ebpf.Map, spec *ebpf.MapSpec) string {
	switch {
	case m.Type() != spec.Type:
		return fmt.Sprintf("type %s, want %s", m.Type(), spec.Type)
	case m.KeySize() != spec.KeySize:
		return fmt.Sprintf("key size %d, want %d", m.KeySize(), spec.KeySize)
	case m.ValueSize() != spec.ValueSize:
		return fmt.Sprintf("value size %d, want %d", m.ValueSize(), spec.ValueSize)
	case m.MaxEntries() != spec.MaxEntries:
		return fmt.Sprintf("max entries %d, want %d", m.MaxEntries(), spec.MaxEntries)
	}
	return ""
}
