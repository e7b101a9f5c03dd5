package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/actorlb/actorlb/internal/bpffs"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Hook is one cgroup hook of the socket load balancer and the program that
// runs there.
type Hook struct {
	// Name is the hook: connect4, sendmsg4, recvmsg4, getpeername4 and the
	// same with 6. The link is pinned as <root>/links/socklb_<Name>.
	Name string
	// Program is the program's name in the object and in the kernel.
	Program string
	// Attach is the cgroup attach type.
	Attach ebpf.AttachType
}

// Hooks lists the eight hooks, IPv4 first.
var Hooks = []Hook{
	{"connect4", socklbProgSock4Connect, ebpf.AttachCGroupInet4Connect},
	{"sendmsg4", socklbProgSock4Sendmsg, ebpf.AttachCGroupUDP4Sendmsg},
	{"recvmsg4", socklbProgSock4Recvmsg, ebpf.AttachCGroupUDP4Recvmsg},
	{"getpeername4", socklbProgSock4Getpeername, ebpf.AttachCgroupInet4GetPeername},
	{"connect6", socklbProgSock6Connect, ebpf.AttachCGroupInet6Connect},
	{"sendmsg6", socklbProgSock6Sendmsg, ebpf.AttachCGroupUDP6Sendmsg},
	{"recvmsg6", socklbProgSock6Recvmsg, ebpf.AttachCGroupUDP6Recvmsg},
	{"getpeername6", socklbProgSock6Getpeername, ebpf.AttachCgroupInet6GetPeername},
}

const (
	// LinksDir is the directory under the bpffs root that holds the links.
	LinksDir = "links"
	// linkPrefix prefixes the pin name of every socket-LB link.
	linkPrefix = "socklb_"
	// ReverseSK4Name and ReverseSK6Name are the datapath's own maps, pinned
	// next to the LB maps: per socket, which VIP a backend stands for.
	ReverseSK4Name = socklbMapLb4ReverseSk
	ReverseSK6Name = socklbMapLb6ReverseSk
	// NodeAddrs4Name and NodeAddrs6Name are the datapath's configuration
	// maps of the node's own addresses (SetNodeAddresses), pinned next to
	// the reverse maps.
	NodeAddrs4Name = socklbMapLb4NodeAddrs
	NodeAddrs6Name = socklbMapLb6NodeAddrs
)

// ownMapNames are the maps that belong to the datapath, not to the engine:
// the loader (or SetNodeAddresses) creates and pins them, Detach removes
// them. lb4_affinity and lb6_affinity are written by the programs only
// (the engine keeps lb_affinity_match, which they check).
var ownMapNames = []string{ReverseSK4Name, ReverseSK6Name, NodeAddrs4Name, NodeAddrs6Name, Affinity4Name, Affinity6Name}

// Affinity4Name and Affinity6Name are the session-affinity LRU maps the
// programs keep per client (network-namespace cookie) and service.
const (
	Affinity4Name = socklbMapLb4Affinity
	Affinity6Name = socklbMapLb6Affinity
)

// lbMapNames are actorlb's maps the programs use; the engine (maps.Open)
// creates them and they must be pinned. The object names its maps exactly
// like the maps package (a test checks); only those the object defines
// are handed in (see pinnedMaps).
var lbMapNames = maps.Names

// Config says where the maps are and where to attach.
type Config struct {
	// Root is the bpffs directory of the pinned LB maps (maps.DefaultRoot
	// if empty). The links are pinned in Root/links.
	Root string
	// Cgroup is the cgroup v2 directory to attach to; empty means the root
	// of the cgroup v2 mount (every process on the host).
	Cgroup string
}

func (c Config) root() string {
	if c.Root == "" {
		return maps.DefaultRoot
	}
	return c.Root
}

// LinkPath returns the pin path of hook's link under root.
func LinkPath(root string, hook Hook) string {
	return filepath.Join(root, LinksDir, linkPrefix+hook.Name)
}

// Attach loads the socket-LB programs on the maps pinned under cfg.Root and
// attaches them to cfg.Cgroup through links pinned under Root/links, so
// that they stay attached when the process exits. It is idempotent: links
// already pinned are updated in place to the new programs (atomically, no
// connection sees a gap); a link attached to another cgroup is replaced by
// one on cfg.Cgroup. The returned Info describes the result.
//
// The programs use the pinned LB maps themselves (never copies); the
// datapath's own reverse maps are pinned under Root too and reused by
// later calls. On error some hooks may already carry the new programs:
// call Attach again or Detach.
func Attach(cfg Config) (Info, error) {
	info, err := attach(cfg)
	if err != nil {
		return Info{}, fmt.Errorf("attach socket lb: %w", err)
	}
	return info, nil
}

func attach(cfg Config) (Info, error) {
	root := cfg.root()
	if err := bpffs.Ensure(root); err != nil {
		return Info{}, err
	}
	cg := cfg.Cgroup
	if cg == "" {
		mnt, err := CgroupV2Mount()
		if err != nil {
			return Info{}, err
		}
		cg = mnt
	}
	cgID, err := CgroupID(cg)
	if err != nil {
		return Info{}, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return Info{}, fmt.Errorf("remove memlock limit: %w (run as root)", err)
	}

	unlock, err := lockLinks(root)
	if err != nil {
		return Info{}, err
	}
	defer unlock()

	spec, err := loadSocklb()
	if err != nil {
		return Info{}, err
	}
	repl, err := pinnedMaps(spec, root)
	defer func() {
		for _, m := range repl {
			m.Close()
		}
	}()
	if err != nil {
		return Info{}, err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return Info{}, fmt.Errorf("load programs: %w\nverifier log:\n%+v", err, ve)
		}
		return Info{}, fmt.Errorf("load programs: %w", err)
	}
	defer coll.Close()

	cgf, err := os.Open(cg)
	if err != nil {
		return Info{}, fmt.Errorf("open cgroup: %w", err)
	}
	defer cgf.Close()

	changes := make(map[string]string, len(Hooks))
	for _, h := range Hooks {
		prog := coll.Programs[h.Program]
		if prog == nil {
			return Info{}, fmt.Errorf("%s: program %s missing from the object", h.Name, h.Program)
		}
		change, err := attachHook(h, prog, int(cgf.Fd()), cgID, LinkPath(root, h))
		if err != nil {
			return Info{}, fmt.Errorf("%s (%s on %s): %w", h.Name, h.Program, cg, err)
		}
		changes[h.Name] = change
	}
	info, err := status(root)
	if err != nil {
		return Info{}, err
	}
	for i := range info.Hooks {
		info.Hooks[i].Change = changes[info.Hooks[i].Name]
	}
	return info, nil
}

// pinnedMaps opens the maps the programs use: actorlb's LB maps, which
// must be pinned under root, and the datapath's own maps (reverse socket
// maps, node addresses), created and pinned there when missing (or
// replaced when their shape is outdated).
func pinnedMaps(spec *ebpf.CollectionSpec, root string) (map[string]*ebpf.Map, error) {
	out := make(map[string]*ebpf.Map, len(spec.Maps))
	for _, name := range lbMapNames {
		ms := spec.Maps[name]
		if ms == nil {
			continue // a map of actorlb's that these programs do not read
		}
		path := filepath.Join(root, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			return out, fmt.Errorf("%w: %s is missing (start the agent with --bpf-root %s first; it creates the maps)", ErrMapsNotPinned, path, root)
		}
		if err != nil {
			return out, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		out[name] = m
		// The capacity is the engine's choice; everything else must match.
		ms.MaxEntries = m.MaxEntries()
		if err := ms.Compatible(m); err != nil {
			return out, fmt.Errorf("%w: %s: %v", ErrIncompatible, path, err)
		}
	}
	for _, name := range ownMapNames {
		m, err := bpffs.OwnMap(spec.Maps[name], filepath.Join(root, name))
		if err != nil {
			return out, err
		}
		out[name] = m
	}
	return out, nil
}

// attachHook makes the link pinned at pinPath run prog on the cgroup cgID.
func attachHook(h Hook, prog *ebpf.Program, cgFD int, cgID uint64, pinPath string) (string, error) {
	old, err := link.LoadPinnedLink(pinPath, nil)
	switch {
	case errors.Is(err, os.ErrNotExist):
		l, err := newLink(h, prog, cgFD)
		if err != nil {
			return "", err
		}
		defer l.Close()
		if err := bpffs.PinReplacing(pinPath, l.Pin); err != nil {
			return "", fmt.Errorf("pin link %s: %w", pinPath, err)
		}
		return "created", nil
	case err != nil:
		return "", fmt.Errorf("open pinned link %s: %w", pinPath, err)
	}
	defer old.Close()
	if li, err := old.Info(); err == nil && li.Type == link.CgroupType {
		if ci := li.Cgroup(); ci != nil && ci.CgroupId == cgID && uint32(ci.AttachType) == uint32(h.Attach) {
			if err := old.Update(prog); err != nil {
				return "", fmt.Errorf("update link %s: %w", pinPath, err)
			}
			return "updated", nil
		}
	}
	// Attached elsewhere, or its cgroup is gone: attach anew, then retire
	// the old link. During the switch both may run; that is harmless (the
	// second sees a backend address, which is no service).
	l, err := newLink(h, prog, cgFD)
	if err != nil {
		return "", err
	}
	defer l.Close()
	if err := bpffs.PinReplacing(pinPath, l.Pin); err != nil {
		return "", fmt.Errorf("pin link %s: %w", pinPath, err)
	}
	_ = old.Detach() // best effort: unpinned and closed, it goes away anyway
	return "moved", nil
}

func newLink(h Hook, prog *ebpf.Program, cgFD int) (*link.RawLink, error) {
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: cgFD, Program: prog, Attach: h.Attach})
	if errors.Is(err, link.ErrNotSupported) {
		return nil, fmt.Errorf("%w: %v", ErrLinkNotSupported, err)
	}
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	return l, nil
}

// lockLinks takes the lock of root/links (see bpffs.LockDir), so that two
// agents attaching or detaching at once do not interleave.
func lockLinks(root string) (func(), error) {
	return bpffs.LockDir(filepath.Join(root, LinksDir))
}

// Detach detaches the socket-LB programs whose links are pinned under
// root/links and removes the pins and the datapath's own maps (reverse
// socket maps, node addresses). The LB maps stay. Nothing attached is not an error.
func Detach(root string) error {
	if root == "" {
		root = maps.DefaultRoot
	}
	if err := detach(root); err != nil {
		return fmt.Errorf("detach socket lb: %w", err)
	}
	return nil
}

func detach(root string) error {
	dir := filepath.Join(root, LinksDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return removePins(root)
	}
	unlock, err := lockLinks(root)
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, h := range Hooks {
		p := LinkPath(root, h)
		l, err := link.LoadPinnedLink(p, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: open pinned link %s: %w", h.Name, p, err))
			continue
		}
		// Detach explicitly: another process may still hold the link.
		if err := l.Detach(); err != nil && !errors.Is(err, link.ErrNotSupported) {
			errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
		}
		l.Close()
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s: unpin: %w", h.Name, err))
		}
	}
	errs = append(errs, removePins(root))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

func removePins(root string) error {
	var errs []error
	for _, name := range ownMapNames {
		p := filepath.Join(root, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unpin %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
