package packetlb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Link is one attached program.
type Link struct {
	// Device is the interface name the link was pinned for.
	Device string
	// Hook is "xdp" or "tc".
	Hook string
	// Mode is "native" or "generic" for XDP, "tcx ingress" for tc.
	Mode string
	// Ifindex is the device's index (0 when the link is defunct: its
	// device is gone).
	Ifindex int
	// ProgramID is the kernel's ID of the running program.
	ProgramID uint32
	// Pin is the link's pin path.
	Pin string
	// Change is what the last Attach did: created or updated ("" from
	// Status).
	Change string
}

// Info describes the attached packet LB.
type Info struct {
	Links []Link
}

// Attached reports whether any device carries the programs.
func (i Info) Attached() bool { return len(i.Links) > 0 }

func (i Info) String() string {
	if !i.Attached() {
		return "packet lb: not attached"
	}
	var b strings.Builder
	b.WriteString("packet lb:")
	for _, l := range i.Links {
		fmt.Fprintf(&b, " %s/%s(%s, prog %d)", l.Device, l.Hook, l.Mode, l.ProgramID)
	}
	return b.String()
}

// Status reports the links pinned under root/links.
func Status(root string) (Info, error) {
	if root == "" {
		root = maps.DefaultRoot
	}
	info, err := status(root)
	if err != nil {
		return Info{}, fmt.Errorf("packet lb status: %w", err)
	}
	return info, nil
}

func status(root string) (Info, error) {
	paths, err := filepath.Glob(filepath.Join(root, LinksDir, linkPrefix+"*"))
	if err != nil {
		return Info{}, err
	}
	sort.Strings(paths)
	devs := map[uint32]devCfg{}
	if m, err := ebpf.LoadPinnedMap(filepath.Join(root, DevicesName), nil); err == nil {
		var k uint32
		var v devCfg
		it := m.Iterate()
		for it.Next(&k, &v) {
			devs[k] = v
		}
		m.Close()
	}
	var info Info
	for _, p := range paths {
		name := strings.TrimPrefix(filepath.Base(p), linkPrefix)
		hook, dev, ok := strings.Cut(name, "_")
		if !ok || strings.HasSuffix(name, "_replacing") {
			continue
		}
		l := Link{Device: unpinSafe(dev), Hook: hook, Pin: p}
		pl, err := link.LoadPinnedLink(p, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Info{}, fmt.Errorf("open pinned link %s: %w", p, err)
		}
		li, err := pl.Info()
		pl.Close()
		if err != nil {
			return Info{}, fmt.Errorf("link info %s: %w", p, err)
		}
		l.ProgramID = uint32(li.Program)
		switch {
		case li.XDP() != nil:
			l.Ifindex = int(li.XDP().Ifindex)
			l.Mode = "generic"
			if devs[uint32(l.Ifindex)].Flags&devXDPNative != 0 {
				l.Mode = "native"
			}
		case li.TCX() != nil:
			l.Ifindex = int(li.TCX().Ifindex)
			l.Mode = "tcx ingress"
		}
		info.Links = append(info.Links, l)
	}
	return info, nil
}
