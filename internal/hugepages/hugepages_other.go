//go:build !linux

package hugepages

func pageSize() int { return 2 << 20 }

// advise does nothing where there are no transparent huge pages (Policy
// is "" there, so Prepare never calls it).
func advise(b []byte, page int) (int, error) { return 0, nil }
