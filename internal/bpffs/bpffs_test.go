package bpffs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsureRefusesADirectoryOutsideBPFFSBeforeCreatingIt(t *testing.T) {
	base := t.TempDir() // tmpfs or a disk, never bpffs
	dir := filepath.Join(base, "a", "b")
	err := Ensure(dir)
	if err == nil {
		t.Fatalf("Ensure(%s) = nil, want an error", dir)
	}
	if !errors.Is(err, ErrNotMounted) {
		t.Fatalf("Ensure(%s) = %v, want ErrNotMounted", dir, err)
	}
	if _, err := os.Stat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Fatalf("Ensure created %s before refusing it (stat: %v)", filepath.Join(base, "a"), err)
	}
}

func TestEnsureRefusesAnExistingDirectoryOutsideBPFFS(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir); !errors.Is(err, ErrNotMounted) {
		t.Fatalf("Ensure(%s) = %v, want ErrNotMounted", dir, err)
	}
}

func TestExistingAncestor(t *testing.T) {
	base := t.TempDir()
	for in, want := range map[string]string{
		base:                                  base,
		filepath.Join(base, "x"):              base,
		filepath.Join(base, "x", "y", "z"):    base,
		"/":                                   "/",
		"/nonexistent-actorlb-test-dir/a/b/c": "/",
	} {
		if got := existingAncestor(in); got != want {
			t.Errorf("existingAncestor(%s) = %s, want %s", in, got, want)
		}
	}
}
