package testutil

import (
	"math/rand/v2"
	"net/netip"
)

// BackendAddrs returns backend addresses of every layout an index by
// address must handle: runs runs of perRun consecutive IPv4 addresses on
// one port (a node's pods), then scattered IPv4 addresses on random ports
// and IPv6 ones of prefixes /104 in a hundred (each scattered one of
// either), with repeats possible.
func BackendAddrs(r *rand.Rand, runs, perRun, scattered int) []netip.AddrPort {
	var out []netip.AddrPort
	add := func(a netip.Addr, port uint16) { out = append(out, netip.AddrPortFrom(a, port)) }
	for n := range runs {
		for i := range perRun {
			add(netip.AddrFrom4([4]byte{10, 1, byte(n), byte(i)}), 8080)
		}
	}
	for i := range scattered {
		add(netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}), uint16(r.IntN(1<<16)))
		add(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(i % 100), 15: byte(r.IntN(256))}), uint16(r.IntN(4)))
	}
	return out
}
