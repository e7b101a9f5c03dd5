package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// HookInfo is the state of one hook's pinned link.
type HookInfo struct {
	Hook
	// Pin is the link's pin path; Pinned whether a link is pinned there.
	Pin    string
	Pinned bool
	// LinkID and ProgramID identify the link and the program it runs.
	LinkID    link.ID
	ProgramID ebpf.ProgramID
	// ProgramName and Tag are the running program's kernel name and tag.
	ProgramName string
	Tag         string
	// CgroupID is the cgroup the link is attached to; 0 when the cgroup
	// was removed (the link no longer runs anything).
	CgroupID uint64
	// Cgroup is CgroupID's path, "" when it cannot be resolved.
	Cgroup string
	// StaleMaps names the LB maps pinned under the root that the program
	// does not read (they were replaced after it was loaded: Attach again).
	StaleMaps []string
	// Change is what Attach did: "created", "updated" (same link, new
	// program) or "moved" (new link on another cgroup). Empty from Status.
	Change string
}

// Attached reports whether the link is pinned and attached to a cgroup.
func (h HookInfo) Attached() bool { return h.Pinned && h.CgroupID != 0 }

// Info is the state of the socket load balancer under one bpffs root.
type Info struct {
	// Root is the bpffs root; the links are in Root/links.
	Root string
	// Hooks has one entry per element of Hooks, in that order.
	Hooks []HookInfo
}

// Attached reports whether every hook is attached, all to one cgroup, and
// every program reads the currently pinned maps.
func (i Info) Attached() bool {
	if len(i.Hooks) == 0 {
		return false
	}
	for _, h := range i.Hooks {
		if !h.Attached() || h.CgroupID != i.Hooks[0].CgroupID || len(h.StaleMaps) > 0 {
			return false
		}
	}
	return true
}

// Cgroup returns the path of the cgroup the hooks are attached to, or ""
// when none is attached (the first attached hook's, if they differ).
func (i Info) Cgroup() string {
	for _, h := range i.Hooks {
		if h.Attached() {
			if h.Cgroup != "" {
				return h.Cgroup
			}
			return fmt.Sprintf("cgroup id %d", h.CgroupID)
		}
	}
	return ""
}

// Summary is one line saying what is attached, for `actorlb status`.
func (i Info) Summary() string {
	var attached, pinned int
	var stale []string
	cgroups := map[uint64]bool{}
	for _, h := range i.Hooks {
		if h.Pinned {
			pinned++
		}
		if h.Attached() {
			attached++
			cgroups[h.CgroupID] = true
		}
		for _, m := range h.StaleMaps {
			if !slices.Contains(stale, m) {
				stale = append(stale, m)
			}
		}
	}
	links := filepath.Join(i.Root, LinksDir)
	switch {
	case pinned == 0:
		return fmt.Sprintf("socket LB: not attached (no links pinned in %s)", links)
	case attached == 0:
		return fmt.Sprintf("socket LB: detached: the cgroup of the links pinned in %s was removed (run the agent, or attach again)", links)
	case len(stale) > 0:
		return fmt.Sprintf("socket LB: attached to %s, but reading maps that are no longer pinned: %s (restart the agent to reattach)",
			i.Cgroup(), strings.Join(stale, ", "))
	case attached < len(i.Hooks) || len(cgroups) > 1:
		var missing []string
		for _, h := range i.Hooks {
			if !h.Attached() {
				missing = append(missing, h.Name)
			}
		}
		s := fmt.Sprintf("socket LB: partially attached to %s: %d of %d hooks", i.Cgroup(), attached, len(i.Hooks))
		if len(missing) > 0 {
			s += "; missing " + strings.Join(missing, ", ")
		}
		if len(cgroups) > 1 {
			s += "; hooks on different cgroups"
		}
		return s
	}
	return fmt.Sprintf("socket LB: attached to %s (%d hooks; links pinned in %s)", i.Cgroup(), attached, links)
}

// String is Summary followed by a table of the hooks.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Summary())
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOOK\tPROGRAM\tPROG ID\tLINK ID\tCGROUP")
	for _, h := range i.Hooks {
		if !h.Pinned {
			fmt.Fprintf(tw, "%s\t-\t-\t-\tnot attached\n", h.Name)
			continue
		}
		cg := h.Cgroup
		switch {
		case h.CgroupID == 0:
			cg = "(cgroup removed)"
		case cg == "":
			cg = fmt.Sprintf("id %d", h.CgroupID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", h.Name, h.ProgramName, h.ProgramID, h.LinkID, cg)
	}
	tw.Flush()
	return b.String()
}

// Status reports which socket-LB programs are attached through the links
// pinned under root (maps.DefaultRoot if empty), and where.
func Status(root string) (Info, error) {
	if root == "" {
		root = maps.DefaultRoot
	}
	info, err := status(root)
	if err != nil {
		return Info{}, fmt.Errorf("socket lb status: %w", err)
	}
	return info, nil
}

func status(root string) (Info, error) {
	info := Info{Root: root}
	pinnedIDs := pinnedMapIDs(root)
	paths := map[uint64]string{}
	for _, h := range Hooks {
		hi := HookInfo{Hook: h, Pin: LinkPath(root, h)}
		l, err := link.LoadPinnedLink(hi.Pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			info.Hooks = append(info.Hooks, hi)
			continue
		}
		if err != nil {
			return Info{}, fmt.Errorf("%s: open pinned link %s: %w", h.Name, hi.Pin, err)
		}
		hi.Pinned = true
		li, err := l.Info()
		l.Close()
		if err != nil {
			return Info{}, fmt.Errorf("%s: link info: %w", h.Name, err)
		}
		hi.LinkID, hi.ProgramID = li.ID, li.Program
		if ci := li.Cgroup(); ci != nil {
			hi.CgroupID = ci.CgroupId
		}
		if hi.CgroupID != 0 {
			p, ok := paths[hi.CgroupID]
			if !ok {
				p = cgroupPath(hi.CgroupID)
				paths[hi.CgroupID] = p
			}
			hi.Cgroup = p
		}
		if err := programInfo(&hi, pinnedIDs); err != nil {
			return Info{}, fmt.Errorf("%s: %w", h.Name, err)
		}
		info.Hooks = append(info.Hooks, hi)
	}
	return info, nil
}

// pinnedMapIDs returns the kernel IDs of the LB maps pinned under root.
func pinnedMapIDs(root string) map[string]ebpf.MapID {
	out := map[string]ebpf.MapID{}
	for _, name := range lbMapNames {
		m, err := ebpf.LoadPinnedMap(filepath.Join(root, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil {
			if id, ok := mi.ID(); ok {
				out[name] = id
			}
		}
		m.Close()
	}
	return out
}

func programInfo(hi *HookInfo, pinnedIDs map[string]ebpf.MapID) error {
	p, err := ebpf.NewProgramFromID(hi.ProgramID)
	if err != nil {
		return fmt.Errorf("open program %d: %w", hi.ProgramID, err)
	}
	defer p.Close()
	pi, err := p.Info()
	if err != nil {
		return fmt.Errorf("program %d info: %w", hi.ProgramID, err)
	}
	hi.ProgramName, hi.Tag = pi.Name, pi.Tag
	used, ok := pi.MapIDs()
	if !ok {
		return nil
	}
	for _, name := range lbMapNames {
		if id, pinned := pinnedIDs[name]; pinned && !slices.Contains(used, id) && programReads(hi.Program, name) {
			hi.StaleMaps = append(hi.StaleMaps, name)
		}
	}
	return nil
}

// programReads reports whether the object's program references the map.
func programReads(program, mapName string) bool {
	refs.once.Do(func() {
		refs.m = map[string][]string{}
		spec, err := loadSocklb()
		if err != nil {
			return
		}
		for name, ps := range spec.Programs {
			for _, ins := range ps.Instructions {
				if ins.IsLoadFromMap() && !slices.Contains(refs.m[name], ins.Reference()) {
					refs.m[name] = append(refs.m[name], ins.Reference())
				}
			}
		}
	})
	return slices.Contains(refs.m[program], mapName)
}

// refs maps each program of the object to the maps it references.
var refs struct {
	once sync.Once
	m    map[string][]string
}
