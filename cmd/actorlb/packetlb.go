package main

import (
	"errors"
	"fmt"
	stdmaps "maps"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/actorlb/actorlb/bpf/packetlb"
	"github.com/prometheus/client_golang/prometheus"
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

// Metrics of the packet datapath, read from its pinned counters at every
// scrape.
var (
	descPktOutcomes = prometheus.NewDesc("actorlb_packetlb_packets_total", "Packets the packet datapath (XDP/tc) handled, by outcome (forward_new, forward_tracked, reply, icmp_error, drop_*, pass_*).", []string{"outcome"}, nil)
	descPktService  = prometheus.NewDesc("actorlb_packetlb_service_packets_total", "Client-to-backend packets the packet datapath forwarded, by service ID.", []string{"service_id"}, nil)
	descPktSvcBytes = prometheus.NewDesc("actorlb_packetlb_service_bytes_total", "Client-to-backend bytes (frames) the packet datapath forwarded, by service ID.", []string{"service_id"}, nil)
	descPktBackend  = prometheus.NewDesc("actorlb_packetlb_backend_packets_total", "Client-to-backend packets the packet datapath forwarded, by backend ID.", []string{"backend_id"}, nil)
	descPktBeBytes  = prometheus.NewDesc("actorlb_packetlb_backend_bytes_total", "Client-to-backend bytes (frames) the packet datapath forwarded, by backend ID.", []string{"backend_id"}, nil)
	descPktLinks    = prometheus.NewDesc("actorlb_packetlb_links", "Programs of the packet datapath attached, by device and hook (xdp, tc).", []string{"device", "hook", "mode"}, nil)
)

// packetLBCollector exports the packet datapath's counters under root.
type packetLBCollector struct{ root string }

func (c *packetLBCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPktOutcomes, descPktService, descPktSvcBytes, descPktBackend, descPktBeBytes, descPktLinks} {
		ch <- d
	}
}

func (c *packetLBCollector) Collect(ch chan<- prometheus.Metric) {
	if info, err := packetlb.Status(c.root); err == nil {
		for _, l := range info.Links {
			ch <- prometheus.MustNewConstMetric(descPktLinks, prometheus.GaugeValue, 1, l.Device, l.Hook, l.Mode)
		}
	}
	st, err := packetlb.ReadStats(c.root)
	if err != nil {
		return
	}
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	for _, name := range packetlb.Outcomes {
		counter(descPktOutcomes, st.Outcomes[name], name)
	}
	for id, t := range st.Services {
		counter(descPktService, t.Packets, strconv.Itoa(int(id)))
		counter(descPktSvcBytes, t.Bytes, strconv.Itoa(int(id)))
	}
	for id, t := range st.Backends {
		counter(descPktBackend, t.Packets, strconv.FormatUint(uint64(id), 10))
		counter(descPktBeBytes, t.Bytes, strconv.FormatUint(uint64(id), 10))
	}
}
