package verify

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/actorlb/actorlb/internal/maglev"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
)

// MaglevReader reads one family's Maglev tables (maps.MaglevMap, or a
// pinned map opened with OpenPinnedMaglev).
type MaglevReader interface {
	TableSize() uint32
	IDs() ([]uint16, error)
	Read(id uint16, dst []uint32) (bool, error)
}

// CheckMaglev checks invariant 7 on the Maglev tables of both families
// (tables[0] IPv4, tables[1] IPv6; a nil reader is a family without the
// map): every service whose master says maglev, and whose counted backends
// (slots 1..count) have a weight above 0, has the table maglev.Build gives
// for them (weights from lb_members, 100 without an entry; actorlb's seed);
// no other service ID has a table. It reads one table at a time.
func CheckMaglev(d table.Dump, tables [2]MaglevReader) ([]Violation, error) {
	c := &checker{}
	var b maglev.Builder
	weights := map[maps.MemberKey]uint16{}
	for _, e := range d.Members {
		if e.Key.Kind == maps.MemberKindBackend && e.Key.BackendID != 0 {
			weights[e.Key] = e.Value.Weight
		}
	}
	for i, fam := range []struct {
		f    maps.Family
		svcs []maps.ServiceEntry
		bes  []maps.BackendEntry
		name string
	}{{maps.IPv4, d.Services4, d.Backends4, maps.Maglev4Name}, {maps.IPv6, d.Services6, d.Backends6, maps.Maglev6Name}} {
		r := tables[i]
		if r == nil {
			continue
		}
		ids, err := r.IDs()
		if err != nil {
			return nil, fmt.Errorf("check maglev tables: %w", err)
		}
		has := map[uint16]bool{}
		for _, id := range ids {
			has[id] = true
		}
		// The master of each service ID: the external one of a two-scope
		// service.
		masters := map[uint16]maps.ServiceEntry{}
		slots := map[maps.ServiceKey]uint32{}
		for _, e := range fam.svcs {
			if e.Key.Slot != 0 {
				slots[e.Key] = e.Value.BackendID
				continue
			}
			if m, ok := masters[e.Value.RevNATIndex]; !ok || e.Key.Scope < m.Key.Scope {
				masters[e.Value.RevNATIndex] = e
			}
		}
		bes := map[uint32]maps.BackendValue{}
		for _, e := range fam.bes {
			bes[e.ID] = e.Value
		}
		m := r.TableSize()
		got := make([]uint32, m)
		for _, id := range slices.Sorted(mapsKeys(masters)) {
			ms := masters[id]
			fe := table.FrontendFromKey(ms.Key).String()
			v := func(kind Kind, format string, args ...any) {
				c.add(Violation{Kind: kind, Family: fam.f, ServiceID: lb.ServiceID(id), Frontend: fe, Detail: fmt.Sprintf(format, args...)})
			}
			if lb.LBAlgorithm(ms.Value.BackendID>>24) != lb.LBAlgMaglev {
				continue
			}
			var in []maglev.Backend
			usable, complete := false, true
			for s := uint16(1); s <= ms.Value.Count; s++ {
				k := ms.Key
				k.Slot = s
				bid, ok := slots[k]
				be, found := bes[bid]
				if !ok || !found {
					complete = false // invariants 1 and 2 say so
					continue
				}
				w, ok := weights[maps.MemberKey{BackendID: bid, RevNATIndex: id}]
				if !ok {
					w = lb.DefaultBackendWeight
				}
				usable = usable || w > 0
				in = append(in, maglev.Backend{Addr: lb.L3n4Addr{Addr: be.Address, Port: be.Port, Protocol: lb.L4Type(be.Proto)}, ID: lb.BackendID(bid), Weight: w})
			}
			delete(has, id)
			if !complete {
				continue
			}
			ok, err := r.Read(id, got)
			if err != nil {
				return nil, fmt.Errorf("check maglev tables: %w", err)
			}
			if !usable {
				if ok {
					v(MaglevStray, "%s holds a table for a maglev service without a backend of weight above 0", fam.name)
				}
				continue
			}
			if !ok {
				v(MaglevMissing, "maglev service has no table in %s", fam.name)
				continue
			}
			want, err := b.Build(m, maglev.Seed, in, nil)
			if err != nil {
				v(MaglevWrong, "its backends give no table: %v", err)
				continue
			}
			diff := 0
			for j := range want {
				if uint32(want[j]) != got[j] {
					diff++
				}
			}
			if diff > 0 {
				v(MaglevWrong, "%d of the %d entries of its table in %s differ from its backends' table", diff, m, fam.name)
			}
		}
		for _, id := range slices.Sorted(mapsKeys(has)) {
			c.add(Violation{Kind: MaglevStray, Family: fam.f, ServiceID: lb.ServiceID(id),
				Detail: fmt.Sprintf("%s holds a table for service ID %d, which is no maglev service of its family", fam.name, id)})
		}
	}
	sortViolations(c.out)
	return c.out, nil
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// pinnedMaglev reads a pinned Maglev map.
type pinnedMaglev struct {
	outer *ebpf.Map
	size  uint32
}

// OpenPinnedMaglev opens the Maglev maps pinned under root read-only (a
// nil reader for a map that is not pinned: a root of an older agent). The
// table size is read from an inner map. close closes them.
func OpenPinnedMaglev(root string) (tables [2]MaglevReader, close func(), err error) {
	var opened []*ebpf.Map
	close = func() {
		for _, m := range opened {
			m.Close()
		}
	}
	for i, name := range []string{maps.Maglev4Name, maps.Maglev6Name} {
		path := filepath.Join(root, name)
		m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			close()
			return tables, nil, fmt.Errorf("read pinned maps: open %s: %w (run as root)", path, err)
		}
		opened = append(opened, m)
		if m.Type() != ebpf.HashOfMaps || m.KeySize() != maps.RevNATKeySize {
			close()
			return tables, nil, fmt.Errorf("read pinned maps: %w: %s is a %s map with key size %d, want a hash of maps with 2",
				maps.ErrIncompatible, path, m.Type(), m.KeySize())
		}
		p := &pinnedMaglev{outer: m}
		var k [maps.RevNATKeySize]byte
		if m.NextKey(nil, &k) == nil {
			var inner *ebpf.Map
			if err := m.Lookup(k, &inner); err == nil {
				p.size = inner.ValueSize() / 4
				inner.Close()
			}
		}
		tables[i] = p
	}
	return tables, close, nil
}

func (p *pinnedMaglev) TableSize() uint32 { return p.size }

func (p *pinnedMaglev) IDs() ([]uint16, error) {
	for try := 1; ; try++ {
		var (
			out []uint16
			k   [maps.RevNATKeySize]byte
			v   uint32
		)
		it := p.outer.Iterate()
		for it.Next(&k, &v) {
			out = append(out, maps.UnmarshalRevNATKey(k))
		}
		err := it.Err()
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, ebpf.ErrIterationAborted) || try == iterateTries {
			return nil, fmt.Errorf("iterate %s: %w", p.outer.String(), err)
		}
	}
}

func (p *pinnedMaglev) Read(id uint16, dst []uint32) (bool, error) {
	var inner *ebpf.Map
	err := p.outer.Lookup(maps.MarshalRevNATKey(id), &inner)
	if errors.Is(err, ebpf.ErrKeyNotExist) || errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read maglev table of service %d: %w", id, err)
	}
	defer inner.Close()
	if inner.ValueSize() != 4*uint32(len(dst)) {
		return false, fmt.Errorf("read maglev table of service %d: %w: %d entries, the map's others have %d", id, maps.ErrIncompatible, inner.ValueSize()/4, len(dst))
	}
	raw, err := inner.LookupBytes(uint32(0))
	if err != nil {
		return false, fmt.Errorf("read maglev table of service %d: %w", id, err)
	}
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint32(raw[4*i:]) // host order (amd64, arm64)
	}
	return true, nil
}
