//go:build linux

package hugepages

import (
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageSize is the size of a transparent huge page (2 MiB on x86-64).
func pageSize() int {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n
		}
	}
	return 2 << 20
}

// advise asks for huge pages for the inside of b aligned on page bytes
// and returns its length.
func advise(b []byte, page int) (int, error) {
	off, n := aligned(uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(page))
	if n == 0 {
		return 0, nil
	}
	if err := unix.Madvise(b[off:off+n], unix.MADV_HUGEPAGE); err != nil {
		return 0, err
	}
	return int(n), nil
}
