//go:build linux

package hugepages

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vma is one mapping of /proc/self/smaps: its range and whether it is
// advised for huge pages (VmFlags "hg"), and its huge pages in KiB.
type vma struct {
	start, end uintptr
	advised    bool
	hugeKB     int
}

func readSmaps(t *testing.T) []vma {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	var out []vma
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if r := strings.SplitN(fields[0], "-", 2); len(r) == 2 && !strings.HasSuffix(fields[0], ":") {
			s, err1 := strconv.ParseUint(r[0], 16, 64)
			e, err2 := strconv.ParseUint(r[1], 16, 64)
			if err1 == nil && err2 == nil {
				out = append(out, vma{start: uintptr(s), end: uintptr(e)})
				continue
			}
		}
		if len(out) == 0 {
			continue
		}
		switch fields[0] {
		case "VmFlags:":
			out[len(out)-1].advised = strings.Contains(" "+strings.Join(fields[1:], " ")+" ", " hg ")
		case "AnonHugePages:":
			out[len(out)-1].hugeKB, _ = strconv.Atoi(fields[1])
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func advisedAt(vs []vma, p uintptr) bool {
	for _, v := range vs {
		if p >= v.start && p < v.end {
			return v.advised
		}
	}
	return false
}

// After Prepare, the heap's next allocations land in memory advised for
// huge pages (or, where the kernel's policy is not madvise, Prepare says
// so and advises nothing).
func TestPrepareAdvisesTheMemoryTheNextAllocationsGet(t *testing.T) {
	r := Prepare(64 << 20)
	if p := Policy(); p != "madvise" {
		assert.Zero(t, r.Advised)
		assert.Contains(t, r.Skipped, "policy")
		t.Logf("policy %q: %s", p, r.Skipped)
		return
	}
	require.Empty(t, r.Skipped)
	require.GreaterOrEqual(t, r.Advised, 60<<20, "the aligned inside of 64 MiB")
	t.Logf("advised %d MiB in %v", r.Advised>>20, r.Took)

	const n, size = 32, 1 << 20
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		for j := 0; j < size; j += 4096 {
			bufs[i][j] = 1
		}
	}
	vs := readSmaps(t)
	in, huge := 0, 0
	for _, b := range bufs {
		if advisedAt(vs, uintptr(unsafe.Pointer(unsafe.SliceData(b)))) {
			in++
		}
	}
	for _, v := range vs {
		if v.advised {
			huge += v.hugeKB
		}
	}
	assert.GreaterOrEqual(t, in, n*3/4, "buffers allocated after Prepare in advised memory")
	t.Logf("%d of %d buffers in advised memory; advised mappings hold %d KiB of huge pages", in, n, huge)
}
