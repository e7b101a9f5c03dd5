package table

import (
	"cmp"
	"net/netip"
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// SourceRanges returns svc's source-range keys (lb4_source_range or
// lb6_source_range, by its family): one per range of a service whose
// master carries FlagSourceRange, nil otherwise.
func SourceRanges(svc *Service) []maps.SourceRangeKey {
	if len(svc.Spec.SourceRanges) == 0 {
		return nil
	}
	out := make([]maps.SourceRangeKey, len(svc.Spec.SourceRanges))
	for i, p := range svc.Spec.SourceRanges {
		out[i] = maps.SourceRangeKeyOf(uint16(svc.ID()), p)
	}
	return out
}

// SortRanges puts ranges in the engine's order (address, then prefix
// length): the order restore rebuilds them in, so that a service reads
// the same before and after a restart.
func SortRanges(ps []netip.Prefix) {
	slices.SortFunc(ps, compareRange)
}

func compareRange(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// CompareSourceRangeKey orders source-range keys by service ID, address,
// prefix length and pad.
func CompareSourceRangeKey(a, b maps.SourceRangeKey) int {
	return cmp.Or(cmp.Compare(a.RevNATIndex, b.RevNATIndex), a.Addr.Compare(b.Addr), cmp.Compare(a.PrefixLen, b.PrefixLen), cmp.Compare(a.Pad, b.Pad))
}

// SourceRangeFixes are the writes that make the source-range maps equal to
// the rebuilt table (rule 10). Sorted, each key once.
type SourceRangeFixes struct {
	Writes  []maps.SourceRangeKey
	Deletes []maps.SourceRangeKey
}

// rangeOwner names a service's ranges in one family's map.
type rangeOwner struct {
	fam maps.Family
	id  uint16
}

// loadSourceRanges indexes the valid source-range entries by family and
// service ID, each list in the engine's order (SortRanges).
func (rb *rebuild) loadSourceRanges(d Dump) {
	rb.ranges = make(map[rangeOwner][]netip.Prefix)
	ks := slices.Clone(d.SourceRanges)
	slices.SortFunc(ks, CompareSourceRangeKey)
	ks = slices.Compact(ks)
	for _, k := range ks {
		if p, ok := k.Prefix(); ok {
			o := rangeOwner{k.Family(), k.RevNATIndex}
			rb.ranges[o] = append(rb.ranges[o], p)
		}
	}
	for _, ps := range rb.ranges {
		SortRanges(ps)
	}
}

// sourceRangesOf gives svc, rebuilt from master m, the ranges the maps
// hold for it when m carries FlagSourceRange (and the deny bit with them).
// It reports false when m carries the flag and the maps hold none: the
// ranges are lost, and rebuilding the service without them would open it
// to every client (or let the denied ones in).
func (rb *rebuild) sourceRangesOf(fam maps.Family, m maps.ServiceValue, svc *Service) bool {
	if m.Flags&lb.FlagSourceRange == 0 {
		return true
	}
	ps := rb.ranges[rangeOwner{fam, m.RevNATIndex}]
	if len(ps) == 0 {
		return false
	}
	svc.Spec.SourceRanges = slices.Clone(ps)
	svc.Spec.SourceRangesDeny = m.Flags2&lb.Flag2SourceRangeDeny != 0
	return true
}

// reconcileSourceRanges applies rule 10: the source-range maps hold
// exactly the ranges of the rebuilt services that carry them. Entries of
// no such service, or not as the engine writes them, are deleted.
func (rb *rebuild) reconcileSourceRanges(d Dump) {
	want := map[maps.SourceRangeKey]bool{}
	for _, fs := range rb.fam {
		for _, g := range fs.groups {
			if g.svc != nil {
				for _, k := range SourceRanges(g.svc) {
					want[k] = true
				}
			}
		}
	}
	fx := &rb.out.SourceRanges
	has := make(map[maps.SourceRangeKey]bool, len(d.SourceRanges))
	for _, k := range d.SourceRanges {
		if has[k] {
			continue
		}
		has[k] = true
		if want[k] {
			continue
		}
		detail := "source range of no service with source ranges: deleted"
		if _, ok := k.Prefix(); !ok {
			detail = "source range key the engine never writes (" + k.String() + "): deleted"
		}
		rb.repair(RepairSourceRange, k.Family(), k.RevNATIndex, "", 0, "%s", detail)
		fx.Deletes = append(fx.Deletes, k)
	}
	for k := range want {
		if !has[k] {
			rb.repair(RepairSourceRange, k.Family(), k.RevNATIndex, "", 0, "source range %s missing: written", k)
			fx.Writes = append(fx.Writes, k)
		}
	}
	slices.SortFunc(fx.Writes, CompareSourceRangeKey)
	slices.SortFunc(fx.Deletes, CompareSourceRangeKey)
}
