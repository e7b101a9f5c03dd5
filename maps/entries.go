package maps

import "iter"

// Entries is a list of a map's entries as a dump read them: each batch's
// raw keys and values kept as the kernel wrote them, decoded each time the
// list is read (DumpEntries), or a list of decoded entries (EntriesOf).
// A raw entry takes the map's key and value size (a service entry 24
// bytes, a backend entry 16), its decoded form two to three times that:
// a restore that reads each list a few times decodes it as it reads and
// never holds the decoded copy (some 9 MB for 10,000 services of ten
// backends, each byte of which a new process pays as fresh memory).
//
// Chunks decodes a batch at a time into the reader's buffer, which the
// reader then ranges over; All calls the reader once an entry. Reading
// 110k IPv4 service entries of a dump took 3.4 ns an entry with Chunks,
// 4.1 with All (scratch benchmark; decoding them into a new slice, as
// Slice and Map.Dump do, 17.7: the slice is 5 MB of fresh memory).
//
// The zero value is an empty list. Nothing writes an Entries once made, so
// it may be read from any number of goroutines.
type Entries[E any] struct {
	n      int
	chunks int
	// chunk returns chunk c decoded into buf (grown if smaller), or the
	// list's own slice (EntriesOf).
	chunk func(c int, buf []E) []E
}

// EntriesOf returns the entries of es (not copied: es must not change
// while the list is read).
func EntriesOf[E any](es []E) Entries[E] {
	if len(es) == 0 {
		return Entries[E]{}
	}
	return Entries[E]{n: len(es), chunks: 1, chunk: func(int, []E) []E { return es }}
}

// dumpedEntries returns the list of the raw chunks ks, vs (the values of
// chunk c are vs[c], as many as its keys), decoded by decode.
func dumpedEntries[E, K, V any](ks [][]K, vs [][]V, n int, decode func(*E, *K, *V)) Entries[E] {
	if n == 0 {
		return Entries[E]{}
	}
	return Entries[E]{n: n, chunks: len(ks), chunk: func(c int, buf []E) []E {
		kc := ks[c]
		vc := vs[c][:len(kc)]
		if cap(buf) < len(kc) {
			buf = make([]E, len(kc))
		}
		buf = buf[:len(kc)]
		for i := range kc {
			decode(&buf[i], &kc[i], &vc[i])
		}
		return buf
	}}
}

// ChunkLen is the most entries of a kernel map's dump chunk (a batch
// lookup's), unless a lookup had to ask for more at once: a Chunks buffer
// of this length is seldom grown. An in-memory map's dump is one chunk.
const ChunkLen = dumpChunk

// Len returns the number of entries (a repeated key counts each time a
// dump read it).
func (l Entries[E]) Len() int { return l.n }

// Chunks yields the entries in the order they were read, a chunk at a
// time, each decoded into buf (grown when a chunk is larger; nil is
// fine), which the next chunk overwrites. A chunk must not be written to:
// it may be the list's own slice.
func (l Entries[E]) Chunks(buf []E) iter.Seq[[]E] {
	return func(yield func([]E) bool) {
		for c := range l.chunks {
			got := l.chunk(c, buf)
			if cap(got) > cap(buf) {
				buf = got[:0] // grown: kept for the next chunks (EntriesOf has no next)
			}
			if len(got) > 0 && !yield(got) {
				return
			}
		}
	}
}

// All yields the entries in the order they were read, one at a time.
func (l Entries[E]) All() iter.Seq[E] {
	return func(yield func(E) bool) {
		for chunk := range l.Chunks(nil) {
			for _, e := range chunk {
				if !yield(e) {
					return
				}
			}
		}
	}
}

// Slice returns the entries decoded into a new slice of their exact length
// (empty, not nil, when there are none).
func (l Entries[E]) Slice() []E {
	out := make([]E, 0, l.n)
	for c := range l.chunks {
		dst := out[len(out):cap(out)]
		got := l.chunk(c, dst) // decoded in place, unless the list's own slice
		if len(got) > 0 && len(dst) > 0 && &got[0] == &dst[0] {
			out = out[:len(out)+len(got)]
			continue
		}
		out = append(out, got...)
	}
	return out
}
