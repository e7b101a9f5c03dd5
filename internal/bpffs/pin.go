package bpffs

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// tmpSuffix names an object pinned for a moment, to be renamed.
const tmpSuffix = "_replacing"

// PinReplacing pins an object at path, atomically replacing whatever is
// pinned there: it pins at a temporary name and renames that over path.
// (bpffs refuses names with dots, hence the suffix.)
func PinReplacing(path string, pin func(string) error) error {
	tmp := path + tmpSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := pin(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// OwnMap opens the map pinned at path, or creates it from ms and pins it
// there; a pinned map of another shape (an older datapath) is replaced.
func OwnMap(ms *ebpf.MapSpec, path string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil:
		if ms.Compatible(m) == nil {
			return m, nil
		}
		m.Close()
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("open pinned map %s: %w", path, err)
	}
	m, err = ebpf.NewMap(ms)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", ms.Name, err)
	}
	if err := PinReplacing(path, m.Pin); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	return m, nil
}

// LockDir creates dir and takes an exclusive lock on it, so that two
// processes changing what is pinned there do not interleave. The returned
// function releases the lock.
func LockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { unix.Close(fd) }, nil
}
