package main

import (
	"errors"
	"fmt"
	stdmaps "maps"
	"slices"
	"text/tabwriter"

	"github.com/actorlb/actorlb/bpf/packetlb"
)

// packetLBView is what `bpf lb list --datapath -o json` prints.
type packetLBView struct {
	Root     string                      `json:"root"`
	Links    []packetlb.Link             `json:"links"`
	Outcomes map[string]uint64           `json:"outcomes,omitempty"`
	Services map[uint16]packetlb.Traffic `json:"services,omitempty"`
	Backends map[uint32]packetlb.Traffic `json:"backends,omitempty"`
}

// printPacketLB shows the packet datapath pinned under root.
func printPacketLB(e *env, out, root string) error {
	info, err := packetlb.Status(root)
	if err != nil {
		return err
	}
	v := packetLBView{Root: root, Links: info.Links}
	st, err := packetlb.ReadStats(root)
	switch {
	case errors.Is(err, packetlb.ErrNotAttached):
	case err != nil:
		return err
	default:
		v.Outcomes, v.Services, v.Backends = st.Outcomes, st.Services, st.Backends
	}
	if isData(out) {
		return e.write(out, v)
	}
	w := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	if !info.Attached() {
		fmt.Fprintf(w, "packet datapath: not attached under %s (agent --datapath-devices)\n", root)
	} else {
		fmt.Fprintln(w, "DEVICE\tHOOK\tMODE\tIFINDEX\tPROGRAM")
		for _, l := range info.Links {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\n", l.Device, l.Hook, l.Mode, l.Ifindex, l.ProgramID)
		}
	}
	if v.Outcomes != nil {
		fmt.Fprintln(w, "\nOUTCOME\tPACKETS")
		for _, name := range packetlb.Outcomes {
			fmt.Fprintf(w, "%s\t%d\n", name, v.Outcomes[name])
		}
		fmt.Fprintln(w, "\nSERVICE ID\tPACKETS\tBYTES")
		for _, id := range slices.Sorted(stdmaps.Keys(v.Services)) {
			fmt.Fprintf(w, "%d\t%d\t%d\n", id, v.Services[id].Packets, v.Services[id].Bytes)
		}
		fmt.Fprintln(w, "\nBACKEND ID\tPACKETS\tBYTES")
		for _, id := range slices.Sorted(stdmaps.Keys(v.Backends)) {
			fmt.Fprintf(w, "%d\t%d\t%d\n", id, v.Backends[id].Packets, v.Backends[id].Bytes)
		}
	}
	return w.Flush()
}
