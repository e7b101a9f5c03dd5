package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/actorlb/actorlb/internal/bpffs"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// DefaultRoot is where the maps are pinned unless Config.Root says otherwise.
const DefaultRoot = "/sys/fs/bpf/actorlb"

// DefaultMaxEntries is the default capacity of every map (upstream's default).
const DefaultMaxEntries = 65536

// Map names: the pin file names and the kernel names (at most 15 characters).
const (
	Service4Name = "lb4_services"
	Service6Name = "lb6_services"
	Backend4Name = "lb4_backends"
	Backend6Name = "lb6_backends"
	RevNAT4Name  = "lb4_reverse_nat"
	RevNAT6Name  = "lb6_reverse_nat"
)

// Names lists every map name in a fixed order: the six upstream maps,
// then lb_members and lb_affinity_match, then the Maglev maps, then the
// source-range maps.
var Names = []string{Service4Name, Backend4Name, RevNAT4Name, Service6Name, Backend6Name, RevNAT6Name, MembersName, AffinityMatchName, Maglev4Name, Maglev6Name, SourceRange4Name, SourceRange6Name}

// Sizes holds the capacity of each map family; zero means DefaultMaxEntries.
type Sizes struct {
	Services int
	Backends int
	RevNAT   int
	// SourceRanges is the capacity of each source-range map (prefixes of
	// all services of a family).
	SourceRanges int
}

func (s Sizes) withDefaults() Sizes {
	for _, p := range []*int{&s.Services, &s.Backends, &s.RevNAT, &s.SourceRanges} {
		if *p == 0 {
			*p = DefaultMaxEntries
		}
	}
	return s
}

// Config says where and how to open the maps.
type Config struct {
	// Root is the bpffs directory the maps are pinned in (DefaultRoot if empty).
	Root string
	// MaxEntries per family.
	MaxEntries Sizes
	// Recreate replaces pinned maps whose shape differs (their entries are
	// lost) instead of refusing them, and accepts a family whose service
	// or backend map vanished while its other maps hold entries (see
	// ErrVanished; the restore then drops what referred to it).
	Recreate bool
	// InMemory uses in-memory maps: no kernel, no privileges, nothing pinned.
	InMemory bool
	// MaglevTableSize is M, the entries of every Maglev table (0 means
	// DefaultMaglevTableSize). internal/maglev.CheckTableSize says which
	// sizes a table can have; Open only bounds it.
	MaglevTableSize uint32
	// NoBatch forces per-element syscalls even where the kernel supports
	// the batch API.
	NoBatch bool
	// Fault, if set, is consulted before every map call (tests only).
	Fault FaultFunc
}

func (c Config) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"services", c.MaxEntries.Services}, {"backends", c.MaxEntries.Backends}, {"revnat", c.MaxEntries.RevNAT}, {"source ranges", c.MaxEntries.SourceRanges}} {
		if f.v < 0 || f.v > 1<<24 {
			return fmt.Errorf("invalid max entries for %s %d: must be between 1 and %d (0 means %d)", f.name, f.v, 1<<24, DefaultMaxEntries)
		}
	}
	if c.MaglevTableSize > MaxMaglevTableSize {
		return fmt.Errorf("invalid maglev table size %d: must be at most %d (0 means %d)", c.MaglevTableSize, MaxMaglevTableSize, DefaultMaglevTableSize)
	}
	return nil
}

// LBMaps holds the maps.
type LBMaps struct {
	Service4, Service6 ServiceMap
	Backend4, Backend6 BackendMap
	RevNAT4, RevNAT6   RevNATMap
	// Members is lb_members (one map for both families: IDs are shared).
	Members MembersMap
	// AffinityMatch is lb_affinity_match (one map for both families).
	AffinityMatch AffinityMatchMap
	// Maglev4 and Maglev6 are lb4_maglev and lb6_maglev.
	Maglev4, Maglev6 MaglevMap
	// SourceRange4 and SourceRange6 are lb4_source_range and
	// lb6_source_range (LPM tries).
	SourceRange4, SourceRange6 SourceRangeMap
	// Root is where the maps are pinned ("" for in-memory maps).
	Root string
	// Created names the maps that were created (not found pinned) by Open.
	Created []string
}

// Services returns the service map of family f.
func (m *LBMaps) Services(f Family) ServiceMap {
	if f == IPv6 {
		return m.Service6
	}
	return m.Service4
}

// Backends returns the backend map of family f.
func (m *LBMaps) Backends(f Family) BackendMap {
	if f == IPv6 {
		return m.Backend6
	}
	return m.Backend4
}

// RevNAT returns the revNAT map of family f.
func (m *LBMaps) RevNAT(f Family) RevNATMap {
	if f == IPv6 {
		return m.RevNAT6
	}
	return m.RevNAT4
}

// Close closes every map; pins stay.
func (m *LBMaps) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{m.Service4, m.Service6, m.Backend4, m.Backend6, m.RevNAT4, m.RevNAT6, m.Members, m.AffinityMatch, m.Maglev4, m.Maglev6, m.SourceRange4, m.SourceRange6} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Open opens (or creates and pins) the maps (Names) under cfg.Root, or makes
// in-memory ones when cfg.InMemory. Pinned maps must match the configured
// shape unless cfg.Recreate.
func Open(cfg Config) (_ *LBMaps, err error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("open maps: %w", err)
	}
	sizes := cfg.MaxEntries.withDefaults()
	lb := &LBMaps{}
	o := opener{cfg: cfg, lb: lb}
	if !cfg.InMemory {
		lb.Root = cfg.Root
		if lb.Root == "" {
			lb.Root = DefaultRoot
		}
		o.cfg.Root = lb.Root
		if err := bpffs.Ensure(lb.Root); err != nil {
			return nil, fmt.Errorf("open maps: %w", err)
		}
		if err := rlimit.RemoveMemlock(); err != nil {
			return nil, fmt.Errorf("open maps: remove memlock limit: %w (run as root)", err)
		}
		if !cfg.Recreate {
			if err := checkVanished(lb.Root); err != nil {
				return nil, fmt.Errorf("open maps: %w", err)
			}
		}
	}
	defer func() {
		if err != nil {
			lb.Close()
		}
	}()
	s4, err := newMap(&o, Service4Name, IPv4, sizes.Services, service4Codec, btfServiceKey(IPv4), btfServiceValue(IPv4))
	if err != nil {
		return nil, err
	}
	lb.Service4 = s4
	s6, err := newMap(&o, Service6Name, IPv6, sizes.Services, service6Codec, btfServiceKey(IPv6), btfServiceValue(IPv6))
	if err != nil {
		return nil, err
	}
	lb.Service6 = s6
	b4, err := newMap(&o, Backend4Name, IPv4, sizes.Backends, backend4Codec, btfBackendKey(), btfBackendValue(IPv4))
	if err != nil {
		return nil, err
	}
	lb.Backend4 = b4
	b6, err := newMap(&o, Backend6Name, IPv6, sizes.Backends, backend6Codec, btfBackendKey(), btfBackendValue(IPv6))
	if err != nil {
		return nil, err
	}
	lb.Backend6 = b6
	r4, err := newMap(&o, RevNAT4Name, IPv4, sizes.RevNAT, revNAT4Codec, btfRevNATKey(), btfRevNATValue(IPv4))
	if err != nil {
		return nil, err
	}
	lb.RevNAT4 = r4
	r6, err := newMap(&o, RevNAT6Name, IPv6, sizes.RevNAT, revNAT6Codec, btfRevNATKey(), btfRevNATValue(IPv6))
	if err != nil {
		return nil, err
	}
	lb.RevNAT6 = r6
	mb, err := newMap(&o, MembersName, 0, sizes.Backends, membersCodec, btfMemberKey("lb_member_key", "kind"), btfMemberValue())
	if err != nil {
		return nil, err
	}
	lb.Members = mb
	am, err := newMap(&o, AffinityMatchName, 0, sizes.Backends, affinityMatchCodec, btfMemberKey("lb_affinity_match", "pad"), btfU8)
	if err != nil {
		return nil, err
	}
	lb.AffinityMatch = am
	msize := cfg.MaglevTableSize
	if msize == 0 {
		msize = DefaultMaglevTableSize
	}
	// Keyed by service ID, as the revNAT maps.
	if lb.Maglev4, err = openMaglev(&o, Maglev4Name, IPv4, msize, sizes.RevNAT); err != nil {
		return nil, err
	}
	if lb.Maglev6, err = openMaglev(&o, Maglev6Name, IPv6, msize, sizes.RevNAT); err != nil {
		return nil, err
	}
	sr4, err := newMap(&o, SourceRange4Name, IPv4, sizes.SourceRanges, sourceRange4Codec, btfSourceRangeKey(IPv4), btfU8, lpmTrie)
	if err != nil {
		return nil, err
	}
	lb.SourceRange4 = sr4
	sr6, err := newMap(&o, SourceRange6Name, IPv6, sizes.SourceRanges, sourceRange6Codec, btfSourceRangeKey(IPv6), btfU8, lpmTrie)
	if err != nil {
		return nil, err
	}
	lb.SourceRange6 = sr6
	return lb, nil
}

type opener struct {
	cfg Config
	lb  *LBMaps
}

// lpmTrie makes a map spec a BPF_MAP_TYPE_LPM_TRIE (which the kernel
// creates only with BPF_F_NO_PREALLOC).
func lpmTrie(s *ebpf.MapSpec) {
	s.Type = ebpf.LPMTrie
	s.Flags = unix.BPF_F_NO_PREALLOC
}

// newMap opens (or creates) a hash map, or of another kind if a tweak
// changes its spec.
func newMap[E, KT any, K, V comparable](o *opener, name string, fam Family, max int, c codec[E, KT, K, V], key, value btf.Type, tweaks ...func(*ebpf.MapSpec)) (*typedMap[E, KT, K, V], error) {
	var st store[K, V]
	if o.cfg.InMemory {
		st = newMemStore[K, V](name, max)
	} else {
		var k K
		var v V
		spec := &ebpf.MapSpec{
			Name:       name,
			Type:       ebpf.Hash,
			KeySize:    uint32(len(rawBytes(&k))),
			ValueSize:  uint32(len(rawBytes(&v))),
			MaxEntries: uint32(max),
			Key:        key,
			Value:      value,
		}
		for _, t := range tweaks {
			t(spec)
		}
		m, created, err := openOrCreate(spec, o.cfg.Root, o.cfg.Recreate)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		if created {
			o.lb.Created = append(o.lb.Created, name)
		}
		id, err := mapID(m)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		es := &ebpfStore[K, V]{m: m, mapName: name, path: filepath.Join(o.cfg.Root, name), id: id}
		// The kernel has no batch operations for LPM tries.
		es.batch.Store(!o.cfg.NoBatch && spec.Type == ebpf.Hash)
		st = es
	}
	if o.cfg.Fault != nil {
		st = &faultyStore[K, V]{store: st, fault: o.cfg.Fault}
	}
	return &typedMap[E, KT, K, V]{fam: fam, st: st, c: c}, nil
}

// Remove unpins every map under root (their entries are lost once no
// program or process holds them). Missing pins are not an error.
func Remove(root string) error {
	var errs []error
	for _, n := range Names {
		if err := os.Remove(filepath.Join(root, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
