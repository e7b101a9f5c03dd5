package packetlb

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/actorlb/actorlb/internal/bpffs"
	"github.com/actorlb/actorlb/internal/maglev"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// Mode is how the programs are attached to a device.
type Mode string

const (
	// ModeAuto attaches XDP in the driver where the driver supports it,
	// else generic XDP, plus the tc companion; it is the default.
	ModeAuto Mode = "auto"
	// ModeNative attaches XDP in the driver (an error where the driver
	// has no XDP support), plus the tc companion.
	ModeNative Mode = "native"
	// ModeGeneric attaches generic (skb) XDP, plus the tc companion.
	ModeGeneric Mode = "generic"
	// ModeTC attaches the tc ingress program alone (no XDP).
	ModeTC Mode = "tc"
)

// ParseMode parses auto, native, generic or tc ("" is auto).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(s)); m {
	case "":
		return ModeAuto, nil
	case ModeAuto, ModeNative, ModeGeneric, ModeTC:
		return m, nil
	}
	return "", fmt.Errorf("%w: datapath mode %q: must be auto, native, generic or tc", ErrInvalidConfig, s)
}

// Config says where the maps are and which devices to attach to.
type Config struct {
	// Root is the bpffs directory of the pinned LB maps (maps.DefaultRoot
	// if empty). The links are pinned in Root/links as packetlb_xdp_<dev>
	// and packetlb_tc_<dev>.
	Root string
	// Devices are the interfaces, in the caller's network namespace, whose
	// ingress traffic is load balanced.
	Devices []string
	// Mode is how to attach (ModeAuto if empty).
	Mode Mode
	// MaglevTableSize is the size M of the engine's Maglev tables (0: the
	// size of a pinned table, else maglev.DefaultTableSize).
	MaglevTableSize uint32
	// ConntrackMax is the capacity of each conntrack map (0: keep the
	// pinned maps' or DefaultConntrackMax). Another value than the pinned
	// maps' replaces them: the connections they track are forgotten.
	ConntrackMax int
}

// DefaultConntrackMax is the capacity of each conntrack map by default.
const DefaultConntrackMax = 262144

// Bounds of Config.ConntrackMax.
const (
	MinConntrackMax = 1024
	MaxConntrackMax = 1 << 24
)

const (
	// LinksDir is the directory under the root that holds the links (the
	// socket LB's too).
	LinksDir = "links"
	// linkPrefix prefixes the pin name of every packet-LB link.
	linkPrefix = "packetlb_"
)

// Names of the datapath's own maps, pinned next to the LB maps.
const (
	CT4Name           = packetlbMapLb4Ct
	CT4RevName        = packetlbMapLb4CtRev
	CT6Name           = packetlbMapLb6Ct
	CT6RevName        = packetlbMapLb6CtRev
	DevicesName       = packetlbMapPacketlbDevices
	ServiceStatsName  = packetlbMapPacketlbSvcStats
	BackendStatsName  = packetlbMapPacketlbBackendStats
	CountersName      = packetlbMapPacketlbCounters
	Maglev4Name       = packetlbMapLb4Maglev
	Maglev6Name       = packetlbMapLb6Maglev
	SourceRange4Name  = packetlbMapLb4SourceRange
	SourceRange6Name  = packetlbMapLb6SourceRange
	maglevSizeVarName = packetlbVarMaglevSize
)

// ownMapNames are the maps the datapath creates, pins and (Detach)
// removes.
var ownMapNames = []string{CT4Name, CT4RevName, CT6Name, CT6RevName, DevicesName, ServiceStatsName, BackendStatsName, CountersName}

// requiredMapNames are the engine's maps the programs cannot work without.
var requiredMapNames = []string{maps.Service4Name, maps.Backend4Name, maps.Service6Name, maps.Backend6Name, maps.MembersName}

// optionalMapNames are engine maps used when pinned; without them the
// programs get empty private ones (no Maglev table, no source range).
var optionalMapNames = []string{Maglev4Name, Maglev6Name, SourceRange4Name, SourceRange6Name}

// Device flags in packetlb_devices: how the device is attached.
const (
	devXDPNative  uint32 = 1 << 0
	devXDPGeneric uint32 = 1 << 1
	devTC         uint32 = 1 << 2
)

// devCfg is struct dev_cfg (24 bytes).
type devCfg struct {
	Addr4 [4]byte
	Addr6 [16]byte
	Flags uint32
}

// Attach loads the packet LB on the maps pinned under cfg.Root and
// attaches it to cfg.Devices through links pinned under Root/links, so
// that it keeps running when the process exits and across agent restarts.
// It is idempotent: a pinned link of the same device is updated in place
// to the new program (no packet sees a gap). The conntrack maps are kept,
// so tracked connections survive. Every device's addresses (its first
// IPv4 and first global IPv6 address) are recorded as its SNAT source and
// NodePort address.
func Attach(cfg Config) (Info, error) {
	info, err := attach(cfg)
	if err != nil {
		return Info{}, fmt.Errorf("attach packet lb: %w", err)
	}
	return info, nil
}

func (c Config) root() string {
	if c.Root == "" {
		return maps.DefaultRoot
	}
	return c.Root
}

func attach(cfg Config) (Info, error) {
	mode, err := ParseMode(string(cfg.Mode))
	if err != nil {
		return Info{}, err
	}
	if cfg.ConntrackMax != 0 && (cfg.ConntrackMax < MinConntrackMax || cfg.ConntrackMax > MaxConntrackMax) {
		return Info{}, fmt.Errorf("%w: conntrack max %d: must be %d..%d", ErrInvalidConfig, cfg.ConntrackMax, MinConntrackMax, MaxConntrackMax)
	}
	if len(cfg.Devices) == 0 {
		return Info{}, fmt.Errorf("%w: no device given (devices: at least one interface name)", ErrInvalidConfig)
	}
	type dev struct {
		name  string
		iface *net.Interface
	}
	var devs []dev
	seen := map[string]bool{}
	for i, name := range cfg.Devices {
		if seen[name] {
			return Info{}, fmt.Errorf("%w: devices[%d]: %q given twice", ErrInvalidConfig, i, name)
		}
		seen[name] = true
		iface, err := net.InterfaceByName(name)
		if err != nil {
			return Info{}, fmt.Errorf("%w: devices[%d]: %q: %v", ErrNoDevice, i, name, err)
		}
		devs = append(devs, dev{name, iface})
	}
	root := cfg.root()
	if err := bpffs.Ensure(root); err != nil {
		return Info{}, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return Info{}, fmt.Errorf("remove memlock limit: %w (run as root)", err)
	}
	unlock, err := bpffs.LockDir(filepath.Join(root, LinksDir))
	if err != nil {
		return Info{}, err
	}
	defer unlock()

	coll, err := load(root, cfg.MaglevTableSize, cfg.ConntrackMax)
	if err != nil {
		return Info{}, err
	}
	defer coll.Close()
	xdpProg := coll.Programs[packetlbProgPacketlbXdp]
	tcProg := coll.Programs[packetlbProgPacketlbTc]
	devMap := coll.Maps[DevicesName]

	changes := map[string]string{}
	for _, d := range devs {
		cfgv := devCfg{}
		a4, a6 := deviceAddrs(d.iface)
		cfgv.Addr4 = a4.As4()
		if a6.IsValid() {
			cfgv.Addr6 = a6.As16()
		}
		if mode != ModeTC {
			flags, change, err := attachXDP(root, d.name, d.iface.Index, xdpProg, mode)
			if err != nil {
				return Info{}, fmt.Errorf("device %s: %w", d.name, err)
			}
			cfgv.Flags |= flags
			changes["xdp/"+d.name] = change
		} else if err := removeLink(linkPath(root, "xdp", d.name)); err != nil {
			return Info{}, fmt.Errorf("device %s: %w", d.name, err)
		}
		change, err := attachTC(root, d.name, d.iface.Index, tcProg)
		if err != nil {
			return Info{}, fmt.Errorf("device %s: %w", d.name, err)
		}
		cfgv.Flags |= devTC
		changes["tc/"+d.name] = change
		if err := devMap.Put(uint32(d.iface.Index), cfgv); err != nil {
			return Info{}, fmt.Errorf("device %s: record addresses: %w", d.name, err)
		}
	}
	info, err := status(root)
	if err != nil {
		return Info{}, err
	}
	for i := range info.Links {
		l := &info.Links[i]
		l.Change = changes[l.Hook+"/"+l.Device]
	}
	return info, nil
}

// load loads the programs on the maps under root (see openMaps).
func load(root string, maglevSize uint32, ctMax int) (*ebpf.Collection, error) {
	spec, err := loadPacketlb()
	if err != nil {
		return nil, err
	}
	repl, size, err := openMaps(spec, root, maglevSize, ctMax)
	defer func() {
		for _, m := range repl {
			m.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[maglevSizeVarName].Set(size); err != nil {
		return nil, fmt.Errorf("set maglev size: %w", err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load programs: %w\nverifier log:\n%+v", err, ve)
		}
		return nil, fmt.Errorf("load programs: %w", err)
	}
	return coll, nil
}

// deviceAddrs returns the first IPv4 and the first global unicast IPv6
// address of iface (invalid when it has none).
func deviceAddrs(iface *net.Interface) (v4, v6 netip.Addr) {
	v4 = netip.IPv4Unspecified()
	addrs, err := iface.Addrs()
	if err != nil {
		return v4, netip.Addr{}
	}
	got4 := false
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		switch {
		case ip.Is4() && !got4:
			v4, got4 = ip, true
		case ip.Is6() && !v6.IsValid() && ip.IsGlobalUnicast():
			v6 = ip
		}
	}
	return v4, v6
}

// openMaps opens what the programs read: the engine's pinned LB maps
// (required), its Maglev and source-range maps (when pinned), and the
// datapath's own maps (created and pinned when missing). It returns the
// Maglev table size the programs must use.
func openMaps(spec *ebpf.CollectionSpec, root string, want uint32, ctMax int) (map[string]*ebpf.Map, uint32, error) {
	out := make(map[string]*ebpf.Map, len(spec.Maps))
	for _, name := range requiredMapNames {
		m, err := pinned(spec.Maps[name], root, name)
		if errors.Is(err, os.ErrNotExist) {
			return out, 0, fmt.Errorf("%w: %s is missing (start the agent with --bpf-root %s first; it creates the maps)", ErrMapsNotPinned, filepath.Join(root, name), root)
		}
		if err != nil {
			return out, 0, err
		}
		out[name] = m
	}
	size := want
	type pinnedTable struct {
		name string
		fam  maps.Family
		m    *ebpf.Map
	}
	var pinnedMaglev []pinnedTable
	defer func() {
		for _, p := range pinnedMaglev {
			p.m.Close()
		}
	}()
	for _, p := range []pinnedTable{{name: Maglev4Name, fam: maps.IPv4}, {name: Maglev6Name, fam: maps.IPv6}} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(root, p.name), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, 0, fmt.Errorf("open pinned map %s: %w", filepath.Join(root, p.name), err)
		}
		p.m = m
		pinnedMaglev = append(pinnedMaglev, p)
		got, err := maps.MaglevTableSizeOf(m)
		if err != nil {
			return out, 0, fmt.Errorf("%s: read a table: %w", p.name, err)
		}
		if got != 0 && size != 0 && got != size {
			return out, 0, fmt.Errorf("%w: %s holds tables of %d entries, not %d", ErrIncompatible, p.name, got, size)
		}
		if got != 0 {
			size = got
		}
	}
	if size == 0 {
		size = maglev.DefaultTableSize
	}
	if err := maglev.CheckTableSize(size); err != nil {
		return out, 0, fmt.Errorf("%w: maglev table size: %v", ErrInvalidConfig, err)
	}
	// A pinned map without a table does not say its size: the engine's
	// maps package probes it (a table under key 0, which is no service ID).
	for _, p := range pinnedMaglev {
		if problem := maps.MaglevShapeProblem(p.m, p.fam, size); problem != "" {
			return out, 0, fmt.Errorf("%w: %s: %s (pass the engine's --maglev-table-size)", ErrIncompatible, p.name, problem)
		}
	}
	for _, name := range []string{Maglev4Name, Maglev6Name} {
		spec.Maps[name].InnerMap.ValueSize = 4 * size
	}
	for _, name := range optionalMapNames {
		m, err := pinned(spec.Maps[name], root, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // the programs get an empty map of their own
		}
		if err != nil {
			return out, 0, err
		}
		out[name] = m
	}
	for _, name := range []string{CT4Name, CT4RevName, CT6Name, CT6RevName} {
		ms := spec.Maps[name]
		switch {
		case ctMax != 0:
			ms.MaxEntries = uint32(ctMax)
		default:
			// Keep the pinned map's capacity, whatever it is.
			if m, err := ebpf.LoadPinnedMap(filepath.Join(root, name), nil); err == nil {
				ms.MaxEntries = m.MaxEntries()
				m.Close()
			} else {
				ms.MaxEntries = DefaultConntrackMax
			}
		}
	}
	for _, name := range ownMapNames {
		m, err := bpffs.OwnMap(spec.Maps[name], filepath.Join(root, name))
		if err != nil {
			return out, 0, err
		}
		out[name] = m
	}
	return out, size, nil
}

// pinned opens the engine's map name under root and checks its shape
// against ms (the capacity is the engine's choice).
func pinned(ms *ebpf.MapSpec, root, name string) (*ebpf.Map, error) {
	path := filepath.Join(root, name)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("open pinned map %s: %w", path, err)
	}
	ms.MaxEntries = m.MaxEntries()
	if err := compatible(ms, m); err != nil {
		m.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrIncompatible, path, err)
	}
	return m, nil
}

func compatible(ms *ebpf.MapSpec, m *ebpf.Map) error {
	if ms.Type == ebpf.HashOfMaps || ms.Type == ebpf.ArrayOfMaps {
		if m.Type() != ms.Type || m.KeySize() != ms.KeySize {
			return fmt.Errorf("want %s with %d-byte keys, have %s with %d-byte keys", ms.Type, ms.KeySize, m.Type(), m.KeySize())
		}
		return nil
	}
	return ms.Compatible(m)
}

func linkPath(root, hook, device string) string {
	return filepath.Join(root, LinksDir, linkPrefix+hook+"_"+pinSafe(device))
}

// pinSafe makes an interface name a bpffs name (no dots).
func pinSafe(name string) string { return strings.ReplaceAll(name, ".", "%2E") }

func unpinSafe(name string) string { return strings.ReplaceAll(name, "%2E", ".") }

// xdpTry is one way to attach XDP: the kernel's flags and the device flag
// recorded for it.
type xdpTry struct {
	flags link.XDPAttachFlags
	dev   uint32
}

// attachXDP makes the link pinned for device run prog at XDP.
func attachXDP(root, device string, ifindex int, prog *ebpf.Program, mode Mode) (uint32, string, error) {
	path := linkPath(root, "xdp", device)
	old, err := link.LoadPinnedLink(path, nil)
	if err == nil {
		defer old.Close()
		cur := currentXDPFlags(root, ifindex)
		sameMode := mode == ModeAuto || (mode == ModeNative && cur == devXDPNative) || (mode == ModeGeneric && cur == devXDPGeneric)
		if li, ierr := old.Info(); ierr == nil && li.XDP() != nil && int(li.XDP().Ifindex) == ifindex && sameMode {
			if err := old.Update(prog); err == nil {
				return cur, "updated", nil
			}
		}
		// Another device of that name, another mode, or a defunct link:
		// attach anew (a mode change leaves a moment without the program).
		_ = old.Close()
		if err := removeLink(path); err != nil {
			return 0, "", err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, "", fmt.Errorf("open pinned link %s: %w", path, err)
	}
	native := xdpTry{link.XDPDriverMode, devXDPNative}
	generic := xdpTry{link.XDPGenericMode, devXDPGeneric}
	try := []xdpTry{native, generic} // auto: the driver's, else generic
	switch mode {
	case ModeNative:
		try = []xdpTry{native}
	case ModeGeneric:
		try = []xdpTry{generic}
	}
	var errs []error
	for _, t := range try {
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: t.flags})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		defer l.Close()
		if err := bpffs.PinReplacing(path, l.Pin); err != nil {
			return 0, "", fmt.Errorf("pin link %s: %w", path, err)
		}
		return t.dev, "created", nil
	}
	return 0, "", fmt.Errorf("%w: %v", ErrXDPNotSupported, errors.Join(errs...))
}

// currentXDPFlags is the XDP mode recorded for ifindex by an earlier
// Attach (the kernel's link info does not say).
func currentXDPFlags(root string, ifindex int) uint32 {
	m, err := ebpf.LoadPinnedMap(filepath.Join(root, DevicesName), nil)
	if err != nil {
		return devXDPGeneric
	}
	defer m.Close()
	var v devCfg
	if err := m.Lookup(uint32(ifindex), &v); err != nil {
		return devXDPGeneric
	}
	return v.Flags & (devXDPNative | devXDPGeneric)
}

// attachTC makes the link pinned for device run prog at tc ingress (tcx).
func attachTC(root, device string, ifindex int, prog *ebpf.Program) (string, error) {
	path := linkPath(root, "tc", device)
	old, err := link.LoadPinnedLink(path, nil)
	if err == nil {
		defer old.Close()
		if li, ierr := old.Info(); ierr == nil && li.TCX() != nil && int(li.TCX().Ifindex) == ifindex {
			if err := old.Update(prog); err == nil {
				return "updated", nil
			}
		}
		_ = old.Close()
		if err := removeLink(path); err != nil {
			return "", err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("open pinned link %s: %w", path, err)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrTCXNotSupported, err)
	}
	defer l.Close()
	if err := bpffs.PinReplacing(path, l.Pin); err != nil {
		return "", fmt.Errorf("pin link %s: %w", path, err)
	}
	return "created", nil
}

// removeLink detaches and unpins the link pinned at path, if any.
func removeLink(path string) error {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		// Detach explicitly: another process may still hold the link.
		if err := l.Detach(); err != nil && !errors.Is(err, link.ErrNotSupported) {
			l.Close()
			return fmt.Errorf("detach %s: %w", path, err)
		}
		l.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	return nil
}

// Detach detaches the packet LB from every device (all its links pinned
// under root/links) and removes its own maps (conntrack, counters, device
// addresses). The LB maps stay. Nothing attached is not an error.
func Detach(root string) error {
	if root == "" {
		root = maps.DefaultRoot
	}
	if err := detach(root); err != nil {
		return fmt.Errorf("detach packet lb: %w", err)
	}
	return nil
}

func detach(root string) error {
	dir := filepath.Join(root, LinksDir)
	var errs []error
	if _, err := os.Stat(dir); err == nil {
		unlock, err := bpffs.LockDir(dir)
		if err != nil {
			return err
		}
		defer unlock()
		paths, err := filepath.Glob(filepath.Join(dir, linkPrefix+"*"))
		if err != nil {
			return err
		}
		for _, p := range paths {
			errs = append(errs, removeLink(p))
		}
	}
	for _, name := range ownMapNames {
		p := filepath.Join(root, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unpin %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// Programs are the packet LB's programs loaded on the maps under a root
// but attached nowhere: for BPF_PROG_TEST_RUN (tests, benchmarks).
type Programs struct {
	// XDP and TC are the two programs.
	XDP, TC *ebpf.Program
	coll    *ebpf.Collection
}

// Close unloads the programs (pinned maps stay).
func (p *Programs) Close() { p.coll.Close() }

// Load loads the programs on the maps under root as Attach does (same
// errors), without attaching them.
func Load(root string, maglevSize uint32) (*Programs, error) {
	if root == "" {
		root = maps.DefaultRoot
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("load packet lb: remove memlock limit: %w (run as root)", err)
	}
	coll, err := load(root, maglevSize, 0)
	if err != nil {
		return nil, fmt.Errorf("load packet lb: %w", err)
	}
	return &Programs{XDP: coll.Programs[packetlbProgPacketlbXdp], TC: coll.Programs[packetlbProgPacketlbTc], coll: coll}, nil
}

// DeviceConfig records addr4 and addr6 (either may be invalid: none) as the
// addresses of the device ifindex, as Attach does for its devices.
func DeviceConfig(root string, ifindex int, addr4, addr6 netip.Addr) error {
	if root == "" {
		root = maps.DefaultRoot
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(root, DevicesName), nil)
	if err != nil {
		return fmt.Errorf("device config: %w", err)
	}
	defer m.Close()
	var v devCfg
	if addr4.Is4() {
		v.Addr4 = addr4.As4()
	}
	if addr6.Is6() {
		v.Addr6 = addr6.As16()
	}
	if err := m.Put(uint32(ifindex), v); err != nil {
		return fmt.Errorf("device config: %w", err)
	}
	return nil
}
