package netns

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Ino
}

// Do runs the function in the namespace given (a socket made there stays
// there) and the caller stays in its own; a missing path is an error
// naming it.
func TestDoRunsInTheNamespaceAndComesBack(t *testing.T) {
	testutil.Privileged(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2 needed (make test-deps installs it): %v", err)
	}
	name := fmt.Sprintf("albnetns%d", testutil.Rand(t).IntN(1<<20))
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	path := "/run/netns/" + name

	self := inode(t, "/proc/thread-self/ns/net")
	var inside uint64
	require.NoError(t, Do(path, func() error {
		inside = inode(t, "/proc/thread-self/ns/net")
		return nil
	}))
	require.Equal(t, inode(t, path), inside, "fn ran in the namespace")
	require.NotEqual(t, self, inside)
	require.Equal(t, self, inode(t, "/proc/thread-self/ns/net"), "the caller did not move")

	want := fmt.Errorf("fn's own error")
	require.Equal(t, want, Do(path, func() error { return want }))
	require.NoError(t, Do("", func() error { return nil }))
	err = Do("/nonexistent/ns", func() error { return nil })
	require.ErrorContains(t, err, "netns /nonexistent/ns")
	require.ErrorIs(t, err, os.ErrNotExist)
}
