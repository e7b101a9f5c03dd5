package bpf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfoPath is read to find the cgroup v2 mount.
const mountInfoPath = "/proc/self/mountinfo"

// fileIDKernfs is the handle type of kernfs (and so cgroup v2) file handles:
// the 8 handle bytes are the cgroup ID (include/linux/exportfs.h).
const fileIDKernfs = 0xfe

// CgroupV2Mount returns where the cgroup v2 (unified) hierarchy is mounted:
// /sys/fs/cgroup on pure v2 systems, /sys/fs/cgroup/unified on hybrid ones.
// It fails with ErrNoCgroup2 when none is mounted.
func CgroupV2Mount() (string, error) {
	f, err := os.Open(mountInfoPath)
	if err != nil {
		return "", fmt.Errorf("find cgroup2 mount: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		line := sc.Text()
		before, after, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		post := strings.Fields(after)
		pre := strings.Fields(before)
		if len(post) < 1 || len(pre) < 5 || post[0] != "cgroup2" {
			continue
		}
		return unescapeMountPath(pre[4]), nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("find cgroup2 mount: read %s: %w", mountInfoPath, err)
	}
	return "", fmt.Errorf("find cgroup2 mount: %w (mount one with 'mount -t cgroup2 none /sys/fs/cgroup/unified')", ErrNoCgroup2)
}

// unescapeMountPath undoes the octal escapes (\040 for space...) of
// /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isCgroup2 reports whether dir is a directory on a cgroup v2 filesystem.
func isCgroup2(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotCgroup2, dir, err)
	}
	if uint32(st.Type) != uint32(unix.CGROUP2_SUPER_MAGIC) {
		return fmt.Errorf("%w: %s is not on a cgroup2 filesystem (find it with 'mount -t cgroup2')", ErrNotCgroup2, dir)
	}
	return nil
}

// CgroupID returns the ID of the cgroup v2 directory dir, the number the
// kernel reports for the cgroup of a link (and bpf_get_current_cgroup_id).
func CgroupID(dir string) (uint64, error) {
	if err := isCgroup2(dir); err != nil {
		return 0, fmt.Errorf("cgroup id: %w", err)
	}
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err == nil && h.Type() == fileIDKernfs && h.Size() == 8 {
		return binary.NativeEndian.Uint64(h.Bytes()), nil
	}
	// Kernels without kernfs file handles: the inode number is the ID.
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("cgroup id: %w", err)
	}
	return st.Ino, nil
}

// cgroupPath returns the path of the cgroup with id below the cgroup v2
// mount, or "" when it cannot be found (removed, or no such cgroup).
func cgroupPath(id uint64) string {
	if id == 0 {
		return ""
	}
	mnt, err := CgroupV2Mount()
	if err != nil {
		return ""
	}
	mfd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(mfd)
	b := make([]byte, 8)
	binary.NativeEndian.PutUint64(b, id)
	fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(fileIDKernfs, b), unix.O_RDONLY|unix.O_CLOEXEC)
	if err == nil {
		defer unix.Close(fd)
		// The link names the path in this process's cgroup namespace
		// relative to the mount: prefix it with the mount.
		if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
			if p == "/" {
				return mnt
			}
			if strings.HasPrefix(p, mnt) {
				return p
			}
			return filepath.Join(mnt, p)
		}
	}
	return walkForCgroup(mnt, id)
}

// walkForCgroup searches the hierarchy below mnt for the directory whose
// inode number is id, visiting at most walkLimit directories.
func walkForCgroup(mnt string, id uint64) string {
	const walkLimit = 20000
	visited := 0
	queue := []string{mnt}
	for len(queue) > 0 && visited < walkLimit {
		dir := queue[0]
		queue = queue[1:]
		visited++
		var st unix.Stat_t
		if unix.Stat(dir, &st) == nil && st.Ino == id {
			return dir
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				queue = append(queue, filepath.Join(dir, e.Name()))
			}
		}
	}
	return ""
}
