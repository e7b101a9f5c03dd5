package verify

import (
	"fmt"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// checkSourceRanges checks invariant 8: a master that carries
// FlagSourceRange has at least one range of its service ID in its
// family's source-range map, and every entry there is a valid range of a
// service whose master (of the entry's family) carries the flag.
func (c *checker) checkSourceRanges(d table.Dump) {
	type owner struct {
		f  maps.Family
		id uint16
	}
	flagged := map[owner]string{} // -> frontend
	plain := map[owner]bool{}
	for _, fam := range []struct {
		f    maps.Family
		svcs []maps.ServiceEntry
	}{{maps.IPv4, d.Services4}, {maps.IPv6, d.Services6}} {
		for _, e := range fam.svcs {
			if e.Key.Slot != 0 || e.Key.Scope != uint8(lb.ScopeExternal) {
				continue
			}
			o := owner{fam.f, e.Value.RevNATIndex}
			if e.Value.Flags&lb.FlagSourceRange != 0 {
				flagged[o] = table.FrontendFromKey(e.Key).String()
			} else {
				plain[o] = true
			}
		}
	}
	has := map[owner]bool{}
	for _, k := range d.SourceRanges {
		o := owner{k.Family(), k.RevNATIndex}
		name := maps.SourceRange4Name
		if o.f == maps.IPv6 {
			name = maps.SourceRange6Name
		}
		if _, ok := k.Prefix(); !ok {
			c.add(Violation{Kind: SourceRangeStray, Family: o.f, ServiceID: lb.ServiceID(o.id),
				Detail: fmt.Sprintf("%s holds a key the engine never writes (%s)", name, k)})
			continue
		}
		if _, ok := flagged[o]; !ok {
			what := "no service of its family"
			if plain[o] {
				what = "a service whose master does not carry the source-range flag"
			}
			c.add(Violation{Kind: SourceRangeStray, Family: o.f, ServiceID: lb.ServiceID(o.id),
				Detail: fmt.Sprintf("%s holds range %s of service ID %d, %s", name, k, o.id, what)})
			continue
		}
		has[o] = true
	}
	for o, fe := range flagged {
		if !has[o] {
			c.add(Violation{Kind: SourceRangeMissing, Family: o.f, ServiceID: lb.ServiceID(o.id), Frontend: fe,
				Detail: "master carries the source-range flag but its family's source-range map holds none of its ranges"})
		}
	}
}
