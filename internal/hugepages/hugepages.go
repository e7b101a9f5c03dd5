package hugepages

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"time"
)

// Result says what Prepare did.
type Result struct {
	// Advised is how many bytes of the heap are advised for huge pages (0
	// when skipped).
	Advised int
	// Skipped says why nothing was advised ("" when Advised > 0).
	Skipped string
	// Took is the time Prepare took, its collection included.
	Took time.Duration
}

// Limits of the heap Prepare works on.
const (
	// FreeMax is the most free heap memory (free or returned to the OS)
	// Prepare works with: more, and the restore reuses that memory first.
	FreeMax = 16 << 20
	// LiveMax is the most live heap Prepare works with: its collection
	// marks the live heap, milliseconds per 10 MB.
	LiveMax = 64 << 20
)

// policyFile holds the kernel's transparent huge page policy, the chosen
// one in brackets: "always [madvise] never".
const policyFile = "/sys/kernel/mm/transparent_hugepage/enabled"

// Policy returns the kernel's transparent huge page policy: "always",
// "madvise", "never", or "" when the kernel has none (no file, or a
// platform without them).
func Policy() string {
	b, err := os.ReadFile(policyFile)
	if err != nil {
		return ""
	}
	return parsePolicy(string(b))
}

// parsePolicy returns the bracketed word of a policy file's text, "" if
// none.
func parsePolicy(s string) string {
	open := strings.IndexByte(s, '[')
	end := strings.IndexByte(s, ']')
	if open < 0 || end < open {
		return ""
	}
	return s[open+1 : end]
}

// Prepare advises the heap's next n bytes for transparent huge pages (see
// the package doc), when the kernel and the heap are as the package doc
// says; else it does nothing and says why.
func Prepare(n int) Result {
	start := time.Now()
	if thpDisabled(os.Getenv("GODEBUG")) {
		return Result{Skipped: "GODEBUG has disablethp=1", Took: time.Since(start)}
	}
	if MemoryLimited() {
		return Result{Skipped: "the process has a memory limit (GOMEMLIMIT): a huge page is resident whole", Took: time.Since(start)}
	}
	r := prepare(n, pageSize(), Policy(), heapNow())
	r.Took = time.Since(start)
	return r
}

// MemoryLimited reports whether the process has a soft memory limit
// (GOMEMLIMIT, debug.SetMemoryLimit; a negative value reads it).
func MemoryLimited() bool { return debug.SetMemoryLimit(-1) != math.MaxInt64 }

// thpDisabled reports whether a GODEBUG value turns the heap's huge pages
// off (disablethp=1; the last setting wins, as in the runtime).
func thpDisabled(godebug string) bool {
	off := false
	for _, kv := range strings.Split(godebug, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == "disablethp" {
			off = v == "1"
		}
	}
	return off
}

// heap is what Prepare reads of the runtime's heap.
type heap struct {
	free, released, live uint64
}

func heapNow() heap {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return heap{free: v[0], released: v[1], live: v[2]}
}

// skipReason is why Prepare leaves a heap h alone under policy (huge
// pages of page bytes), "" if it does not.
func skipReason(n, page int, policy string, h heap) string {
	switch {
	case n < 2*page:
		return fmt.Sprintf("%d bytes hold no aligned huge page", n)
	case policy == "":
		return "the kernel has no transparent huge pages"
	case policy != "madvise":
		return fmt.Sprintf("the kernel's transparent huge page policy is %q, not \"madvise\"", policy)
	case h.free+h.released > FreeMax:
		return fmt.Sprintf("the heap has %d MiB free, which it reuses first", (h.free+h.released)>>20)
	case h.live > LiveMax:
		return fmt.Sprintf("the heap has %d MiB live, more than a collection should mark here", h.live>>20)
	}
	return ""
}

func prepare(n, page int, policy string, h heap) Result {
	if why := skipReason(n, page, policy, h); why != "" {
		return Result{Skipped: why}
	}
	advised, err := adviseFresh(n, page)
	if err != nil {
		return Result{Skipped: fmt.Sprintf("madvise: %v", err)}
	}
	runtime.GC() // frees the buffer: its advised memory goes back to the page allocator
	return Result{Advised: advised}
}

// adviseFresh allocates n bytes, advises their inside aligned on huge
// pages of page bytes and lets them go; it returns how many bytes were advised. The buffer is not
// written (a large allocation from memory the heap has not used is not
// cleared).
//
//go:noinline
func adviseFresh(n, page int) (int, error) {
	b := make([]byte, n)
	advised, err := advise(b, page)
	runtime.KeepAlive(b)
	return advised, err
}

// aligned returns the offset and length of the largest part of a buffer
// at address p of n bytes that starts and ends on a multiple of page.
func aligned(p, n, page uintptr) (off, length uintptr) {
	beg := (p + page - 1) &^ (page - 1)
	end := (p + n) &^ (page - 1)
	if end <= beg {
		return 0, 0
	}
	return beg - p, end - beg
}
