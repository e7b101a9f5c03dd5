package maps

import "iter"

// Entries is a list of a map's entries as a dump read them: each batch's
// raw keys and values kept as the kernel wrote them, decoded each time the
// list is iterated (DumpEntries), or a list of decoded entries (EntriesOf).
// A raw entry takes the map's key and value size (a service entry 24
// bytes, a backend entry 16), its decoded form two to three times that:
// a restore that reads each list once or twice decodes it as it reads and
// never holds the decoded copy (some 9 MB for 10,000 services of ten
// backends, each byte of which a new process pays as fresh memory).
//
// The zero value is an empty list. Nothing writes an Entries once made, so
// it may be read from any number of goroutines.
type Entries[E any] struct {
	n   int
	all func(yield func(E) bool)
}

// EntriesOf returns the entries of es (not copied: es must not change
// while the list is read).
func EntriesOf[E any](es []E) Entries[E] {
	return Entries[E]{n: len(es), all: func(yield func(E) bool) {
		for _, e := range es {
			if !yield(e) {
				return
			}
		}
	}}
}

// Len returns the number of entries (a repeated key counts each time a
// dump read it).
func (l Entries[E]) Len() int { return l.n }

// All yields the entries in the order they were read.
func (l Entries[E]) All() iter.Seq[E] {
	if l.all == nil {
		return func(func(E) bool) {}
	}
	return l.all
}

// Slice returns the entries decoded into a new slice of their exact length
// (empty, not nil, when there are none).
func (l Entries[E]) Slice() []E {
	out := make([]E, 0, l.n)
	for e := range l.All() {
		out = append(out, e)
	}
	return out
}
