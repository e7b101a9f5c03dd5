package packetlb

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
)

// Outcomes names the programs' per-packet outcome counters, in the order
// of packetlb_counters (enum pkt_counter in packetlb.c).
var Outcomes = []string{
	"pass_not_service",  // no frontend: passed to the stack
	"forward_new",       // a new connection forwarded
	"forward_tracked",   // a packet of a tracked connection forwarded
	"reply",             // a backend's reply translated back to the client
	"drop_source_range", // the client is outside the service's source ranges
	"drop_no_backend",   // the service has no usable backend
	"drop_no_nat_port",  // no free SNAT port towards the backend
	"drop_no_route",     // no route to the backend or client
	"pass_fragment",     // an IP fragment (not load-balanced)
	"pass_unparsed",     // truncated, IPv6 extension header, ICMP of no tracked connection, not TCP/UDP
	"pass_no_neighbour", // XDP: next hop unresolved, left to the tc program
	"drop_no_snat_addr", // the egress device has no address to SNAT to
	"icmp_error",        // an ICMP error of a tracked connection translated
}

// Traffic counts packets and bytes.
type Traffic struct {
	Packets uint64
	Bytes   uint64
}

// pktStat is struct pkt_stat.
type pktStat struct {
	Packets uint64
	Bytes   uint64
}

// Stats are the programs' counters, summed over CPUs.
type Stats struct {
	// Outcomes by name (see Outcomes).
	Outcomes map[string]uint64
	// Services: client-to-backend traffic by service ID (frontend
	// packets forwarded), only IDs that saw traffic.
	Services map[uint16]Traffic
	// Backends: the same by backend ID.
	Backends map[uint32]Traffic
}

// ReadStats reads the counters pinned under root. Without the packet LB's
// maps (never attached) it fails with ErrNotAttached.
func ReadStats(root string) (Stats, error) {
	if root == "" {
		root = maps.DefaultRoot
	}
	st, err := readStats(root)
	if err != nil {
		return Stats{}, fmt.Errorf("packet lb stats: %w", err)
	}
	return st, nil
}

func readStats(root string) (Stats, error) {
	open := func(name string) (*ebpf.Map, error) {
		m, err := ebpf.LoadPinnedMap(filepath.Join(root, name), nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) || isNotExist(err) {
			return nil, fmt.Errorf("%w: %s", ErrNotAttached, filepath.Join(root, name))
		}
		return m, err
	}
	st := Stats{Outcomes: map[string]uint64{}, Services: map[uint16]Traffic{}, Backends: map[uint32]Traffic{}}
	cm, err := open(CountersName)
	if err != nil {
		return Stats{}, err
	}
	defer cm.Close()
	for i, name := range Outcomes {
		var per []uint64
		if err := cm.Lookup(uint32(i), &per); err != nil {
			return Stats{}, fmt.Errorf("read %s: %w", CountersName, err)
		}
		for _, v := range per {
			st.Outcomes[name] += v
		}
	}
	sm, err := open(ServiceStatsName)
	if err != nil {
		return Stats{}, err
	}
	defer sm.Close()
	if err := perCPUBatch(sm, func(k uint32, t Traffic) {
		if t.Packets > 0 && k > 0 && k <= 0xFFFF {
			st.Services[uint16(k)] = t
		}
	}); err != nil {
		return Stats{}, fmt.Errorf("read %s: %w", ServiceStatsName, err)
	}
	bm, err := open(BackendStatsName)
	if err != nil {
		return Stats{}, err
	}
	defer bm.Close()
	var k uint32
	var per []pktStat
	it := bm.Iterate()
	for it.Next(&k, &per) {
		var t Traffic
		for _, p := range per {
			t.Packets += p.Packets
			t.Bytes += p.Bytes
		}
		st.Backends[k] = t
	}
	if err := it.Err(); err != nil {
		return Stats{}, fmt.Errorf("read %s: %w", BackendStatsName, err)
	}
	return st, nil
}

// perCPUBatch reads a per-CPU array of pkt_stat in chunks, calling fn with
// each index and its sum over CPUs.
func perCPUBatch(m *ebpf.Map, fn func(uint32, Traffic)) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]pktStat, chunk*ncpu)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			var t Traffic
			for c := range ncpu {
				p := vals[i*ncpu+c]
				t.Packets += p.Packets
				t.Bytes += p.Bytes
			}
			fn(keys[i], t)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func isNotExist(err error) bool { return err != nil && errors.Is(err, fs.ErrNotExist) }
