package conntrack

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// raw reads and deletes the entries of one map in their kernel layout: K
// and V are byte arrays of the layout's key and value sizes, so that the
// batch calls take typed slices (cilium/ebpf counts elements by slice
// length). One raw per table; its buffers are reused from page to page.
type raw[K, V any] struct {
	kb   func(*K) []byte // the bytes of a key
	vb   func(*V) []byte
	mk   func([]byte) K // a key from its bytes
	keys []K
	vals []V
}

// page is what one read returned: raw keys and values, valid until the
// next read of the same table.
type page struct {
	keys, vals [][]byte
	end        bool // the map has no entry after these
}

// readBatch reads up to n entries with BPF_MAP_LOOKUP_BATCH from cursor.
// ENOSPC with nothing read (the next bucket holds more than n entries)
// returns an empty page that is not the end.
func (r *raw[K, V]) readBatch(m *ebpf.Map, cursor *ebpf.MapBatchCursor, n int) (page, error) {
	if cap(r.keys) < n {
		r.keys, r.vals = make([]K, n), make([]V, n)
	}
	keys, vals := r.keys[:n], r.vals[:n]
	cnt, err := m.BatchLookup(cursor, keys, vals, nil)
	var p page
	switch {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		p.end = true
	case err != nil && isNoSpace(err) && cnt == 0:
		return p, nil
	case err != nil:
		return p, err
	}
	for i := range cnt {
		p.keys = append(p.keys, r.kb(&keys[i]))
		p.vals = append(p.vals, r.vb(&vals[i]))
	}
	return p, nil
}

// readIter reads up to n entries by key iteration after *last (nil: from
// the first key), and peeks one key further to tell the end. Entries
// deleted between NextKey and Lookup are skipped.
func (r *raw[K, V]) readIter(m *ebpf.Map, last []byte, n int) (page, error) {
	if cap(r.keys) < n {
		r.keys, r.vals = make([]K, n), make([]V, n)
	}
	var p page
	var prev any // nil: the first key
	if last != nil {
		prev = append([]byte(nil), last...)
	}
	for i := 0; i < n; {
		k := &r.keys[i]
		if err := m.NextKey(prev, k); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				p.end = true
				return p, nil
			}
			return p, fmt.Errorf("next key: %w", err)
		}
		prev = append([]byte(nil), r.kb(k)...)
		if err := m.Lookup(r.kb(k), &r.vals[i]); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue // deleted meanwhile; the next NextKey goes on from it
			}
			return p, err
		}
		p.keys = append(p.keys, r.kb(k))
		p.vals = append(p.vals, r.vb(&r.vals[i]))
		i++
	}
	var next K
	if err := m.NextKey(prev, &next); errors.Is(err, ebpf.ErrKeyNotExist) {
		p.end = true
	}
	return p, nil
}

// del deletes keys (each in the map's key layout) and returns how many
// existed. batch uses BPF_MAP_DELETE_BATCH, which stops at the first
// missing key: the rest is sent again.
func (r *raw[K, V]) del(m *ebpf.Map, keys [][]byte, batch bool) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	deleted := 0
	if !batch {
		for _, k := range keys {
			err := m.Delete(k)
			switch {
			case err == nil:
				deleted++
			case !errors.Is(err, ebpf.ErrKeyNotExist):
				return deleted, err
			}
		}
		return deleted, nil
	}
	ks := make([]K, len(keys))
	for i, k := range keys {
		ks[i] = r.mk(k)
	}
	for len(ks) > 0 {
		n, err := m.BatchDelete(ks, nil)
		switch {
		case err == nil:
			return deleted + n, nil
		case errors.Is(err, ebpf.ErrKeyNotExist) && n < len(ks):
			deleted += n
			ks = ks[n+1:]
		default:
			return deleted + n, err
		}
	}
	return deleted, nil
}
