package maps

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// onlySizeDiffers reports whether the pinned map m has spec's type, key
// and value sizes and only another capacity.
func onlySizeDiffers(m *ebpf.Map, spec *ebpf.MapSpec) bool {
	return m.Type() == spec.Type && m.KeySize() == spec.KeySize && m.ValueSize() == spec.ValueSize && m.MaxEntries() != spec.MaxEntries
}

// resize copies every entry of old (pinned at path) into a new map of
// spec's capacity and pins it at path in old's place, in one rename: the
// path never lacks a map, and old keeps its entries until its last user
// lets go of it (programs attached to it switch when they are loaded
// again against the pin: the socket-LB links are updated in place). It
// refuses to shrink below the entries old holds, before changing anything.
func resize(old *ebpf.Map, spec *ebpf.MapSpec, path string) (*ebpf.Map, error) {
	keys, values, err := rawEntries(old)
	if err != nil {
		return nil, fmt.Errorf("resize %s: read: %w", path, err)
	}
	if len(keys) > int(spec.MaxEntries) {
		return nil, fmt.Errorf("%w: %s holds %d entries, more than the %d asked for (ask for at least %d, or pass --recreate-maps / Recreate to start it empty)",
			ErrIncompatible, path, len(keys), spec.MaxEntries, len(keys))
	}
	nm, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("resize %s: create: %w", path, err)
	}
	for i := range keys {
		if err := nm.Update(keys[i], values[i], ebpf.UpdateNoExist); err != nil {
			nm.Close()
			return nil, fmt.Errorf("resize %s: copy entry %d of %d: %w", path, i+1, len(keys), err)
		}
	}
	if err := repinOver(nm, path); err != nil {
		nm.Close()
		return nil, fmt.Errorf("resize %s: %w", path, err)
	}
	return nm, nil
}

// rawEntries reads every entry of m as raw bytes.
func rawEntries(m *ebpf.Map) (keys, values [][]byte, err error) {
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, append([]byte(nil), k...))
		values = append(values, append([]byte(nil), v...))
	}
	if err := it.Err(); err != nil {
		return nil, nil, err
	}
	return keys, values, nil
}

// repinOver pins m at path, replacing what is there in one rename (bpffs
// refuses dots in names, hence the suffix).
func repinOver(m *ebpf.Map, path string) error {
	c, err := m.Clone() // unpinned: Pin on a handle that has a pin path would move that pin
	if err != nil {
		return err
	}
	defer c.Close()
	tmp := path + "_repin"
	if err := removeIfExists(tmp); err != nil {
		return err
	}
	if err := c.Pin(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = removeIfExists(tmp)
		return err
	}
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
