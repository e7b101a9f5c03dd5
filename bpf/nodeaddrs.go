package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/actorlb/actorlb/internal/bpffs"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// MaxNodeAddresses is how many node addresses of each family
// SetNodeAddresses accepts (the capacity of lb4_node_addrs and
// lb6_node_addrs).
const MaxNodeAddresses = 1024

// SetNodeAddresses makes addrs the node's own addresses, for the socket
// LB's surrogate lookup: a connect or send to one of them (or to loopback,
// always included) at a port that no frontend of that address has is
// served by the surrogate frontend 0.0.0.0 or :: of that port, if that is
// a NodePort or HostPort service. It replaces the whole set. The maps are
// pinned under root (maps.DefaultRoot if empty), created if needed, so it
// may be called before or after Attach; Detach removes them.
//
// IPv4-mapped IPv6 addresses count as IPv4 and zones are ignored. An
// invalid, unspecified or multicast address, or more than
// MaxNodeAddresses of one family, is an error that names it and changes
// nothing.
func SetNodeAddresses(root string, addrs []netip.Addr) error {
	if err := setNodeAddresses(root, addrs); err != nil {
		return fmt.Errorf("set node addresses: %w", err)
	}
	return nil
}

// NodeAddresses returns the node addresses pinned under root, IPv4 first,
// each family sorted; none when the maps do not exist.
func NodeAddresses(root string) ([]netip.Addr, error) {
	if root == "" {
		root = maps.DefaultRoot
	}
	var out []netip.Addr
	for _, name := range []string{NodeAddrs4Name, NodeAddrs6Name} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(root, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("node addresses: open %s: %w", name, err)
		}
		set, err := nodeAddrKeys(m)
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("node addresses: %s: %w", name, err)
		}
		out = append(out, set...)
	}
	return out, nil
}

func setNodeAddresses(root string, addrs []netip.Addr) error {
	if root == "" {
		root = maps.DefaultRoot
	}
	want := map[string][]netip.Addr{}
	for i, a := range addrs {
		field := "addresses[" + strconv.Itoa(i) + "]"
		switch {
		case !a.IsValid():
			return fmt.Errorf("%s: invalid address (empty)", field)
		case a.Unmap().IsUnspecified():
			return fmt.Errorf("%s %s: the unspecified address is the surrogate frontend itself, not a node address", field, a)
		case a.IsMulticast():
			return fmt.Errorf("%s %s: a multicast address is not a node address", field, a)
		}
		a = a.Unmap().WithZone("")
		name := NodeAddrs6Name
		if a.Is4() {
			name = NodeAddrs4Name
		}
		if !slices.Contains(want[name], a) {
			want[name] = append(want[name], a)
		}
	}
	for name, set := range want {
		if len(set) > MaxNodeAddresses {
			return fmt.Errorf("%d %s addresses: at most %d per family", len(set), map[bool]string{true: "IPv4", false: "IPv6"}[name == NodeAddrs4Name], MaxNodeAddresses)
		}
	}
	if err := bpffs.Ensure(root); err != nil {
		return err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("remove memlock limit: %w (run as root)", err)
	}
	unlock, err := lockLinks(root)
	if err != nil {
		return err
	}
	defer unlock()
	spec, err := loadSocklb()
	if err != nil {
		return err
	}
	for _, name := range []string{NodeAddrs4Name, NodeAddrs6Name} {
		m, err := bpffs.OwnMap(spec.Maps[name], filepath.Join(root, name))
		if err != nil {
			return err
		}
		err = replaceNodeAddrs(m, want[name])
		m.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// replaceNodeAddrs makes the set in m exactly want: it adds the new
// addresses first, then deletes the others.
func replaceNodeAddrs(m *ebpf.Map, want []netip.Addr) error {
	have, err := nodeAddrKeys(m)
	if err != nil {
		return err
	}
	one := uint8(1)
	for _, a := range want {
		if err := m.Put(a.AsSlice(), &one); err != nil {
			return fmt.Errorf("add %s: %w", a, err)
		}
	}
	for _, a := range have {
		if slices.Contains(want, a) {
			continue
		}
		if err := m.Delete(a.AsSlice()); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete %s: %w", a, err)
		}
	}
	return nil
}

func nodeAddrKeys(m *ebpf.Map) ([]netip.Addr, error) {
	var out []netip.Addr
	key := make([]byte, m.KeySize())
	var val uint8
	it := m.Iterate()
	for it.Next(key, &val) {
		a, ok := netip.AddrFromSlice(key)
		if ok {
			out = append(out, a)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("iterate: %w", err)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}
