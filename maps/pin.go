package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// PinState says what a map's pin names now.
type PinState uint8

const (
	// PinNone: the map is not pinned (an in-memory map).
	PinNone PinState = iota
	// PinOK: the pin names this map.
	PinOK
	// PinMissing: nothing is pinned at the map's path any more (removed
	// under a running agent). Programs and the agent still use the map,
	// but a restart would not find it.
	PinMissing
	// PinReplaced: the pin names another map (replaced under a running
	// agent): a restart would open that one.
	PinReplaced
)

func (s PinState) String() string {
	switch s {
	case PinNone:
		return "unpinned"
	case PinOK:
		return "ok"
	case PinMissing:
		return "missing"
	case PinReplaced:
		return "replaced"
	}
	return fmt.Sprintf("pinstate(%d)", uint8(s))
}

// checkPin compares the map pinned at s.path with the one s writes, by
// kernel map ID.
func (s *ebpfStore[K, V]) checkPin() (PinState, error) {
	return checkPinned(s.path, s.id)
}

// checkPinned compares the map pinned at path with the map of kernel ID
// want.
func checkPinned(path string, want ebpf.MapID) (PinState, error) {
	pinned, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return pinStateOfRefusedLoad(path, err)
	}
	defer pinned.Close()
	id, err := mapID(pinned)
	if err != nil {
		return PinOK, fmt.Errorf("check pin %s: %w", path, err)
	}
	if id != want {
		return PinReplaced, nil
	}
	return PinOK, nil
}

// pinStateOfRefusedLoad says what is at path when it could not be opened
// as a map (loadErr): missing only when nothing is there any more, replaced
// only when what is there is not a map (a directory, a symlink, a pinned
// program or link). An error the kernel gives while opening a pin that is
// there (no memory, no descriptor left, a descriptor closed under the
// open) is returned: it is not drift, and repairing it would count a
// repair nobody needed.
func pinStateOfRefusedLoad(path string, loadErr error) (PinState, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return PinMissing, nil
	case err != nil:
		return PinOK, fmt.Errorf("check pin %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return PinReplaced, nil
	}
	var errno unix.Errno
	if errors.As(loadErr, &errno) {
		return PinOK, fmt.Errorf("check pin %s: %w", path, loadErr)
	}
	return PinReplaced, nil // cilium/ebpf: "<path> is not a Map"
}

// repin pins the map at its path again, replacing whatever is there in
// one step: it is pinned beside the path, then renamed over it.
func (s *ebpfStore[K, V]) repin() error {
	if err := repinOver(s.m, s.path); err != nil {
		return fmt.Errorf("repin %s: %w", s.path, err)
	}
	return nil
}

func mapID(m *ebpf.Map) (ebpf.MapID, error) {
	info, err := m.Info()
	if err != nil {
		return 0, fmt.Errorf("map info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("map info: the kernel reports no map ID")
	}
	return id, nil
}

func (s *memStore[K, V]) checkPin() (PinState, error) { return PinNone, nil }
func (s *memStore[K, V]) repin() error                { return nil }
func (s *memStore[K, V]) pinPath() string             { return "" }
func (s *ebpfStore[K, V]) pinPath() string            { return s.path }

// PinPath is where the map is pinned ("" for an in-memory map).
func (m *typedMap[E, KT, K, V]) PinPath() string { return m.st.pinPath() }

// CheckPin reports whether the map's pin still names this map.
func (m *typedMap[E, KT, K, V]) CheckPin() (PinState, error) { return m.st.checkPin() }

// Repin pins this map at its path again, replacing what is there.
func (m *typedMap[E, KT, K, V]) Repin() error { return m.st.repin() }

// lossOf says what removing the named map's pin costs at the next start.
func lossOf(name string) string {
	fam := "IPv4"
	if name == Service6Name || name == Backend6Name || name == RevNAT6Name || name == SourceRange6Name {
		fam = "IPv6"
	}
	switch name {
	case Service4Name, Service6Name:
		return fmt.Sprintf("every %s service is lost, and the next start deletes their backends and revNAT entries as orphans", fam)
	case Backend4Name, Backend6Name:
		return fmt.Sprintf("every %s backend is lost, and the next start removes them from their services", fam)
	case SourceRange4Name, SourceRange6Name:
		return fmt.Sprintf("every %s service's source ranges are lost, and the next start removes the services that had some (their masters carry the flag: nothing is opened by accident)", fam)
	}
	return "its entries are lost and rebuilt from the services at the next start"
}

// checkVanished refuses to open the maps when a family's service or
// backend map is no longer pinned while the family's other maps still
// hold entries that refer to it: a restore would "repair" the family to
// empty (every service or every backend of it gone). It runs before Open
// creates anything, so that a refused start changes nothing.
func checkVanished(root string) error {
	families := []struct{ svc, be, rev string }{
		{Service4Name, Backend4Name, RevNAT4Name},
		{Service6Name, Backend6Name, RevNAT6Name},
	}
	for _, f := range families {
		pinned := func(name string) bool {
			_, err := os.Stat(filepath.Join(root, name))
			return err == nil
		}
		var missing string
		var holders []string
		switch {
		case !pinned(f.svc):
			missing = f.svc
			for _, n := range []string{f.be, f.rev} {
				if nonEmpty(root, n) {
					holders = append(holders, n)
				}
			}
		case !pinned(f.be):
			missing = f.be
			if nonEmpty(root, f.svc) {
				holders = append(holders, f.svc)
			}
		}
		if len(holders) == 0 {
			continue
		}
		return fmt.Errorf("%w: %s is not pinned under %s while %s still hold entries that refer to it; starting would make it empty and %s. "+
			"If it was removed while an agent ran, that agent pins it again: start it (or let it run) instead; "+
			"if the root is wrong, pass the right --bpf-root; to accept the loss, pass --recreate-maps (Recreate)",
			ErrVanished, missing, root, strings.Join(holders, " and "), lossOf(missing))
	}
	return nil
}

// nonEmpty reports whether the map pinned at root/name holds an entry
// (false if it is not there or not a map).
func nonEmpty(root, name string) bool {
	m, err := ebpf.LoadPinnedMap(filepath.Join(root, name), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return false
	}
	defer m.Close()
	k := make([]byte, m.KeySize())
	return m.NextKey(nil, &k) == nil
}
