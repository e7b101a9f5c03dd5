package verify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
)

// ErrNotPinned occurs when DumpPinned finds no map pinned under a name it
// needs: the agent has never run with that --bpf-root, or the maps were
// removed.
var ErrNotPinned = errors.New("map not pinned")

// Dump reads the six maps of m.
func Dump(m *maps.LBMaps) (table.Dump, error) {
	var d table.Dump
	var err error
	if d.Services4, err = m.Service4.Dump(); err != nil {
		return table.Dump{}, fmt.Errorf("dump maps: %w", err)
	}
	if d.Services6, err = m.Service6.Dump(); err != nil {
		return table.Dump{}, fmt.Errorf("dump maps: %w", err)
	}
	if d.Backends4, err = m.Backend4.Dump(); err != nil {
		return table.Dump{}, fmt.Errorf("dump maps: %w", err)
	}
	if d.Backends6, err = m.Backend6.Dump(); err != nil {
		return table.Dump{}, fmt.Errorf("dump maps: %w", err)
	}
	if d.RevNAT4, err = m.RevNAT4.Dump(); err != nil {
		return table.Dump{}, fmt.Errorf("dump maps: %w", err)
	}
	if d.RevNAT6, err = m.RevNAT6.Dump(); err != nil {
		return table.Dump{}, fmt.Errorf("dump maps: %w", err)
	}
	if m.Members != nil {
		if d.Members, err = m.Members.Dump(); err != nil {
			return table.Dump{}, fmt.Errorf("dump maps: %w", err)
		}
	}
	if m.AffinityMatch != nil {
		if d.AffinityMatch, err = m.AffinityMatch.Dump(); err != nil {
			return table.Dump{}, fmt.Errorf("dump maps: %w", err)
		}
	}
	for _, sr := range []maps.SourceRangeMap{m.SourceRange4, m.SourceRange6} {
		if sr == nil {
			continue
		}
		ks, err := sr.Dump()
		if err != nil {
			return table.Dump{}, fmt.Errorf("dump maps: %w", err)
		}
		d.SourceRanges = append(d.SourceRanges, ks...)
	}
	d.Members, d.AffinityMatch = nilIfEmpty(d.Members), nilIfEmpty(d.AffinityMatch)
	return d, nil
}

// DumpPinned reads the six maps pinned under root (a bpffs directory, such
// as maps.DefaultRoot) without creating or changing anything: it opens each
// pin read-only, checks its type and its key and value sizes against
// actorlb's layouts, and iterates it. It works whether or not an agent is
// running; entries an agent writes while DumpPinned reads may or may not be
// seen.
func DumpPinned(root string) (table.Dump, error) {
	var (
		d   table.Dump
		err error
	)
	if d.Services4, err = readPinned(root, maps.Service4Name, func(k [maps.Service4KeySize]byte, v [maps.ServiceValueSize]byte) maps.ServiceEntry {
		return maps.ServiceEntry{Key: maps.UnmarshalService4Key(k), Value: maps.UnmarshalServiceValue(v)}
	}); err != nil {
		return table.Dump{}, err
	}
	if d.Backends4, err = readPinned(root, maps.Backend4Name, func(k [maps.BackendKeySize]byte, v [maps.Backend4Size]byte) maps.BackendEntry {
		return maps.BackendEntry{ID: maps.UnmarshalBackendKey(k), Value: maps.UnmarshalBackend4(v)}
	}); err != nil {
		return table.Dump{}, err
	}
	if d.RevNAT4, err = readPinned(root, maps.RevNAT4Name, func(k [maps.RevNATKeySize]byte, v [maps.RevNAT4Size]byte) maps.RevNATEntry {
		return maps.RevNATEntry{ID: maps.UnmarshalRevNATKey(k), Value: maps.UnmarshalRevNAT4(v)}
	}); err != nil {
		return table.Dump{}, err
	}
	if d.Services6, err = readPinned(root, maps.Service6Name, func(k [maps.Service6KeySize]byte, v [maps.ServiceValueSize]byte) maps.ServiceEntry {
		return maps.ServiceEntry{Key: maps.UnmarshalService6Key(k), Value: maps.UnmarshalServiceValue(v)}
	}); err != nil {
		return table.Dump{}, err
	}
	if d.Backends6, err = readPinned(root, maps.Backend6Name, func(k [maps.BackendKeySize]byte, v [maps.Backend6Size]byte) maps.BackendEntry {
		return maps.BackendEntry{ID: maps.UnmarshalBackendKey(k), Value: maps.UnmarshalBackend6(v)}
	}); err != nil {
		return table.Dump{}, err
	}
	if d.RevNAT6, err = readPinned(root, maps.RevNAT6Name, func(k [maps.RevNATKeySize]byte, v [maps.RevNAT6Size]byte) maps.RevNATEntry {
		return maps.RevNATEntry{ID: maps.UnmarshalRevNATKey(k), Value: maps.UnmarshalRevNAT6(v)}
	}); err != nil {
		return table.Dump{}, err
	}
	defer func() {
		d.Members, d.AffinityMatch, d.SourceRanges = nilIfEmpty(d.Members), nilIfEmpty(d.AffinityMatch), nilIfEmpty(d.SourceRanges)
	}()
	// actorlb's own maps are younger than the six: a root written by an
	// older agent has none (read as empty).
	if d.Members, err = readPinned(root, maps.MembersName, func(k [maps.MemberKeySize]byte, v [maps.MemberValueSize]byte) maps.MemberEntry {
		return maps.MemberEntry{Key: maps.UnmarshalMemberKey(k), Value: maps.UnmarshalMemberValue(v)}
	}); err != nil && !errors.Is(err, os.ErrNotExist) {
		return table.Dump{}, err
	}
	if d.AffinityMatch, err = readPinned(root, maps.AffinityMatchName, func(k [maps.AffinityMatchKeySize]byte, _ [maps.AffinityMatchValSize]byte) maps.AffinityMatchKey {
		return maps.UnmarshalAffinityMatchKey(k)
	}); err != nil && !errors.Is(err, os.ErrNotExist) {
		return table.Dump{}, err
	}
	// The source-range maps are younger still.
	sr4, err := readPinned(root, maps.SourceRange4Name, func(k [maps.SourceRange4KeySize]byte, _ [maps.SourceRangeValueSize]byte) maps.SourceRangeKey {
		return maps.UnmarshalSourceRange4Key(k)
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return table.Dump{}, err
	}
	sr6, err := readPinned(root, maps.SourceRange6Name, func(k [maps.SourceRange6KeySize]byte, _ [maps.SourceRangeValueSize]byte) maps.SourceRangeKey {
		return maps.UnmarshalSourceRange6Key(k)
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return table.Dump{}, err
	}
	d.SourceRanges = append(sr4, sr6...)
	return d, nil
}

func nilIfEmpty[E any](s []E) []E {
	if len(s) == 0 {
		return nil
	}
	return s
}

// iterateTries bounds how often an iteration that the kernel aborted
// (entries deleted under it) is started again.
const iterateTries = 5

// readPinned reads the map pinned at root/name, whose raw key and value
// types are K and V, and decodes every entry.
func readPinned[K, V comparable, E any](root, name string, decode func(K, V) E) ([]E, error) {
	path := filepath.Join(root, name)
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("read pinned maps: %w: %s (has an agent run with --bpf-root %s? start one with 'actorlb agent --bpf-root %s')",
				ErrNotPinned, path, root, root)
		}
		return nil, fmt.Errorf("read pinned maps: open %s: %w (run as root)", path, err)
	}
	defer m.Close()
	var k K
	var v V
	wantK, wantV := int(unsafe.Sizeof(k)), int(unsafe.Sizeof(v))
	wantType, wantName := ebpf.Hash, "hash"
	if name == maps.SourceRange4Name || name == maps.SourceRange6Name {
		wantType, wantName = ebpf.LPMTrie, "LPM trie"
	}
	if m.Type() != wantType || int(m.KeySize()) != wantK || int(m.ValueSize()) != wantV {
		return nil, fmt.Errorf("read pinned maps: %w: %s is a %s map with key size %d and value size %d, want a %s map with %d and %d",
			maps.ErrIncompatible, path, m.Type(), m.KeySize(), m.ValueSize(), wantName, wantK, wantV)
	}
	for try := 1; ; try++ {
		var out []E
		it := m.Iterate()
		for it.Next(&k, &v) {
			out = append(out, decode(k, v))
		}
		err := it.Err()
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, ebpf.ErrIterationAborted) || try == iterateTries {
			return nil, fmt.Errorf("read pinned maps: iterate %s: %w", path, err)
		}
	}
}
