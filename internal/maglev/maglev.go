package maglev

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/cespare/xxhash/v2"
)

// Table sizes: primes only (the fill visits every entry of a backend's
// permutation only if its skip is coprime with M).
const (
	MinTableSize     = 251
	MaxTableSize     = 131071
	DefaultTableSize = 16381
)

// Seed is the hash seed of the tables actorlb writes: a constant, so that
// every node (and actorlb bpf lb verify) builds the same table from the
// same backends.
const Seed uint64 = 0x61637472_6c62_6d67 // "actrlbmg"

// Backend is one backend of a table.
type Backend struct {
	// Addr is the backend's identity, hashed into its permutation: the
	// same on every node.
	Addr lb.L3n4Addr
	// ID is what the table holds for the backend (node-local).
	ID lb.BackendID
	// Weight is the backend's share of the entries, relative to the
	// others'; 0 gives it none.
	Weight uint16
}

// Builder computes tables, keeping its scratch buffers between calls.
// The zero Builder is ready to use.
type Builder struct {
	order []slot
	taken []uint64
}

// slot is a backend during a fill: where its permutation is, and its
// credit of turns.
type slot struct {
	key    [19]byte // address (16), port (2), protocol (1): the hashed identity
	id     lb.BackendID
	weight uint32
	pos    uint32 // the next entry of its permutation
	skip   uint32
	credit uint32
}

// Build returns the table of size m for backends bs, hashed with seed,
// written into dst (grown if needed; its previous contents do not
// matter). Entries are backend IDs; with no backend of weight above 0
// every entry is 0 (no backend).
func Build(m uint32, seed uint64, bs []Backend, dst []lb.BackendID) ([]lb.BackendID, error) {
	var b Builder
	return b.Build(m, seed, bs, dst)
}

// Build is the package's Build with b's scratch buffers.
func (b *Builder) Build(m uint32, seed uint64, bs []Backend, dst []lb.BackendID) ([]lb.BackendID, error) {
	if err := CheckTableSize(m); err != nil {
		return nil, fmt.Errorf("maglev table: %w", err)
	}
	order, err := b.slots(m, seed, bs)
	if err != nil {
		return nil, fmt.Errorf("maglev table: %w", err)
	}
	dst = slices.Grow(dst[:0], int(m))[:m]
	clear(dst)
	if len(order) == 0 {
		return dst, nil
	}
	b.taken = fill(dst, order, b.taken)
	return dst, nil
}

// CheckTableSize says whether m can be a table size.
func CheckTableSize(m uint32) error {
	if m < MinTableSize || m > MaxTableSize || !isPrime(m) {
		return fmt.Errorf("%w: table size %d: want a prime in [%d, %d] (for example 251, 1021, 4093, 16381, 65521, 131071)",
			ErrInvalidTableSize, m, MinTableSize, MaxTableSize)
	}
	return nil
}

// slots returns the backends of weight above 0 with their permutations,
// in the order of their keys (the fill's result depends on the order:
// sorting makes it independent of the order given).
func (b *Builder) slots(m uint32, seed uint64, bs []Backend) ([]slot, error) {
	order := b.order[:0]
	for i, be := range bs {
		if !be.Addr.Addr.IsValid() {
			return nil, fmt.Errorf("%w: backends[%d].addr: not set", ErrInvalidBackend, i)
		}
		s := slot{id: be.ID, weight: uint32(be.Weight)}
		a := be.Addr.Addr.Unmap().As16()
		copy(s.key[:16], a[:])
		binary.BigEndian.PutUint16(s.key[16:18], be.Addr.Port)
		s.key[18] = byte(be.Addr.Protocol)
		order = append(order, s)
	}
	slices.SortFunc(order, func(a, b slot) int { return bytes.Compare(a.key[:], b.key[:]) })
	for i := 1; i < len(order); i++ {
		if order[i].key == order[i-1].key {
			return nil, fmt.Errorf("%w: backend %s: given twice", ErrInvalidBackend, keyString(order[i].key))
		}
	}
	order = slices.DeleteFunc(order, func(s slot) bool { return s.weight == 0 })
	var buf [8 + 19]byte
	binary.LittleEndian.PutUint64(buf[:8], seed)
	for i := range order {
		s := &order[i]
		copy(buf[8:], s.key[:])
		h := xxhash.Sum64(buf[:])
		// Offset and skip from the two halves of one 64-bit hash, as
		// Maglev's two hashes; a skip in [1, m-1] is coprime with the
		// prime m, so the permutation visits every entry.
		s.pos = uint32(h>>32) % m
		s.skip = uint32(h)%(m-1) + 1
	}
	b.order = order
	return order, nil
}

// fill assigns every entry of t: round after round, each backend whose
// credit reaches a turn takes the next entry of its permutation that is
// still free. A backend of the largest weight takes a turn in every
// round, one of weight w in w of every maxW rounds. taken is scratch (a
// bitmap of the assigned entries); fill returns it for reuse.
func fill(t []lb.BackendID, order []slot, taken []uint64) []uint64 {
	m := uint32(len(t))
	var maxW uint32
	for i := range order {
		maxW = max(maxW, order[i].weight)
	}
	taken = slices.Grow(taken[:0], int(m+63)/64)[:(m+63)/64]
	clear(taken)
	left := m
	for left > 0 {
		for i := range order {
			s := &order[i]
			s.credit += s.weight
			if s.credit < maxW {
				continue
			}
			s.credit -= maxW
			p := s.pos
			for taken[p/64]&(1<<(p%64)) != 0 {
				p += s.skip
				if p >= m {
					p -= m
				}
			}
			taken[p/64] |= 1 << (p % 64)
			t[p] = s.id
			if p += s.skip; p >= m {
				p -= m
			}
			s.pos = p
			if left--; left == 0 {
				return taken
			}
		}
	}
	return taken
}

// Changed returns the indexes at which next differs from prev (all of
// next's if their sizes differ): the entries to write when a table
// changes.
func Changed(prev, next []lb.BackendID) []uint32 {
	var out []uint32
	for i := range next {
		if len(prev) != len(next) || prev[i] != next[i] {
			out = append(out, uint32(i))
		}
	}
	return out
}

func keyString(k [19]byte) string {
	a := lb.L3n4Addr{Addr: netip.AddrFrom16([16]byte(k[:16])).Unmap(), Port: binary.BigEndian.Uint16(k[16:18]), Protocol: lb.L4Type(k[18])}
	return a.String()
}

func isPrime(n uint32) bool {
	if n < 2 {
		return false
	}
	for d := uint32(2); d <= n/d; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
