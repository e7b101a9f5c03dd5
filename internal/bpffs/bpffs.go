package bpffs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultMount is where the BPF filesystem is conventionally mounted.
const DefaultMount = "/sys/fs/bpf"

// ErrNotMounted occurs when a pin directory is not on a BPF filesystem and
// the filesystem could not be mounted for it.
var ErrNotMounted = errors.New("bpffs not mounted")

// IsBPFFS reports whether path is on a mounted BPF filesystem.
func IsBPFFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, err
	}
	return uint32(st.Type) == uint32(unix.BPF_FS_MAGIC), nil
}

// Ensure makes dir usable for pinning: if dir lies below DefaultMount and no
// BPF filesystem is mounted there, it mounts one (root only); then it creates
// dir. It fails when dir would not be on a BPF filesystem, before creating
// anything when dir does not exist yet.
func Ensure(dir string) error {
	dir = filepath.Clean(dir)
	if under(dir, DefaultMount) {
		if err := os.MkdirAll(DefaultMount, 0o755); err != nil {
			return fmt.Errorf("ensure bpffs: create %s: %w", DefaultMount, err)
		}
		ok, err := IsBPFFS(DefaultMount)
		if err != nil {
			return fmt.Errorf("ensure bpffs: statfs %s: %w", DefaultMount, err)
		}
		if !ok {
			if err := unix.Mount("bpf", DefaultMount, "bpf", 0, ""); err != nil {
				return fmt.Errorf("ensure bpffs: %w at %s and mounting it failed: %v (run as root, or mount it with 'mount -t bpf bpf %s', or pass --bpf-root on a mounted bpffs)",
					ErrNotMounted, DefaultMount, err, DefaultMount)
			}
		}
	}
	// Refuse before creating anything: a directory created below a
	// parent that is not on a BPF filesystem would not be on one either.
	if parent := existingAncestor(dir); parent != dir {
		ok, err := IsBPFFS(parent)
		if err != nil {
			return fmt.Errorf("ensure bpffs: statfs %s: %w", parent, err)
		}
		if !ok {
			return fmt.Errorf("ensure bpffs: %w at %s, where %s would be created (mount one with 'mount -t bpf bpf DIR' or pass --bpf-root below %s); nothing was created",
				ErrNotMounted, parent, dir, DefaultMount)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("ensure bpffs: create %s: %w (run as root or pass --bpf-root)", dir, err)
	}
	ok, err := IsBPFFS(dir)
	if err != nil {
		return fmt.Errorf("ensure bpffs: statfs %s: %w", dir, err)
	}
	if !ok {
		return fmt.Errorf("ensure bpffs: %w at %s (mount one with 'mount -t bpf bpf DIR' or pass --bpf-root below %s)", ErrNotMounted, dir, DefaultMount)
	}
	return nil
}

// existingAncestor returns dir if it exists, else its nearest existing
// parent.
func existingAncestor(dir string) string {
	for {
		if _, err := os.Lstat(dir); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

func under(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+"/")
}
