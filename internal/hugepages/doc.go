// Package hugepages asks the kernel for transparent huge pages for the
// heap a restore is about to fill.
//
// A process that has just started writes every page of its heap for the
// first time, and each first write of a 4 KiB page is a page fault. On
// some machines a fault is dear: on the development VM (a paravirtualised
// guest) one costs some 15 µs, so that the 10,000 fresh pages a restore
// of 10k services of 10 backends fills cost more than the restore's own
// work (docs/performance-history.md has the figures). A 2 MiB
// transparent huge page is one fault for 512 such pages. Go's runtime does
// not ask for them (it gave that up in Go 1.21.1), and a kernel whose
// policy is "madvise" gives them only to memory advised with
// MADV_HUGEPAGE.
//
// Prepare advises the heap's next bytes: it allocates a buffer of that
// size from memory the heap has not used yet (the buffer is not written:
// fresh memory needs no clearing), advises its 2 MiB-aligned inside, and
// frees it with one collection; the page allocator then hands that memory
// out first, and each 2 MiB of it becomes one huge page when first
// written.
//
// Lifecycle: Prepare is a function with no state; calling it twice
// advises twice as much. It does nothing, and says why, unless the
// kernel's policy is "madvise" (with "always" the heap gets huge pages
// anyway, with "never" it cannot), the heap has little memory free (what
// it has is reused first, and a buffer over memory used before would be
// cleared page by page, the faults it is meant to save), and little live
// (the collection marks it), nor when GODEBUG has disablethp=1 or the
// process has a memory limit (GOMEMLIMIT: a huge page is resident
// whole).
//
// Error contract: Prepare does not fail. What it could not do is in
// Result.Skipped; a refused madvise is reported there too and leaves the
// heap as it was (the advice changes no memory's contents).
package hugepages
