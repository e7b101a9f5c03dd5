package table

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// The output of Rebuild: the rebuilt table (Restored), the map writes that
// make the maps equal to it (Fixes) and the repairs that explain them
// (Repair, RepairKind). Which rule emits which kind and fills which list:
// the package doc.

// Fixes are the map writes that make one family's maps consistent with the
// rebuilt table. The engine applies them in field order: RevNATWrites,
// MasterDeletes, SlotWrites, MasterWrites, SlotDeletes, BackendDeletes,
// RevNATDeletes (make before break: the datapath, reading master -> slot ->
// backend concurrently, never finds a master whose count exceeds the slots
// present, or a slot pointing to a deleted backend, unless the dump itself
// had one). Every list is sorted (service keys by frontend, then slot; IDs
// ascending) and holds each key at most once.
type Fixes struct {
	// RevNATWrites (rule 7) are revNAT entries missing or pointing elsewhere.
	RevNATWrites []maps.RevNATEntry
	// MasterDeletes (rules 2 and 3) are the masters of services removed entirely.
	MasterDeletes []maps.ServiceKey
	// SlotWrites (rule 5) are slots 1..n whose value must change or that are missing.
	SlotWrites []maps.ServiceEntry
	// MasterWrites (rule 5) are masters whose value must change.
	MasterWrites []maps.ServiceEntry
	// SlotDeletes (rules 1, 2, 3 and 5) are slots beyond the new count,
	// slots without master and all slots of removed services.
	SlotDeletes []maps.ServiceKey
	// BackendDeletes (rules 4 and 6) are invalid, duplicate or orphan
	// backend IDs of this family.
	BackendDeletes []uint32
	// RevNATDeletes (rule 7) are revNAT entries to remove: entries of a kept
	// service that live in the other family's map, entries of removed
	// frontends, orphans and invalid ones (ID 0).
	RevNATDeletes []uint16
}

// Empty reports whether there is nothing to write or delete.
func (f *Fixes) Empty() bool { return f.Writes() == 0 }

// Writes returns the total number of entries written or deleted.
func (f *Fixes) Writes() int {
	return len(f.RevNATWrites) + len(f.MasterDeletes) + len(f.SlotWrites) + len(f.MasterWrites) +
		len(f.SlotDeletes) + len(f.BackendDeletes) + len(f.RevNATDeletes)
}

// RepairKind classifies an inconsistency found in the dumped maps. Its
// string form is stable: logs and metric labels use it.
type RepairKind string

const (
	// RepairSlotsWithoutMaster (rule 1): slots of a frontend that has no
	// master entry; they are deleted.
	RepairSlotsWithoutMaster RepairKind = "slots-without-master"
	// RepairMissingSlot (rule 5): the master's count+qcount exceeds the
	// slots present; the missing slots are dropped and the rest compacted.
	RepairMissingSlot RepairKind = "missing-slot"
	// RepairExtraSlot (rule 5): a slot with an index above the master's
	// count+qcount; it is deleted.
	RepairExtraSlot RepairKind = "extra-slot"
	// RepairDanglingSlot (rule 5): a slot pointing to a backend ID that is
	// missing from its family's backend map (or is 0), or to a backend in
	// maintenance (which gets no slot); the slot is dropped.
	RepairDanglingSlot RepairKind = "dangling-slot"
	// RepairDuplicateServiceID (rule 3): two frontends (in any family: one
	// ID space) with one service ID; all but one are removed.
	RepairDuplicateServiceID RepairKind = "duplicate-service-id"
	// RepairMissingRevNAT (rule 7): a service without a revNAT entry; it is
	// written.
	RepairMissingRevNAT RepairKind = "missing-revnat"
	// RepairWrongRevNAT (rule 7): the revNAT entry of a service's ID points
	// to another address or port (it is rewritten), or lives in the other
	// family's map (it is deleted there).
	RepairWrongRevNAT RepairKind = "wrong-revnat"
	// RepairDuplicateBackend (rules 4 and 5): one backend address (address,
	// port, protocol) under two or more IDs; the lowest ID is kept, slots
	// are rewritten to it and the other IDs deleted.
	RepairDuplicateBackend RepairKind = "duplicate-backend"
	// RepairOrphanBackend (rule 6): a backend no slot refers to; it is
	// deleted.
	RepairOrphanBackend RepairKind = "orphan-backend"
	// RepairOrphanRevNAT (rule 7): a revNAT entry whose ID no service has;
	// it is deleted.
	RepairOrphanRevNAT RepairKind = "orphan-revnat"
	// RepairInvalidEntry (rules 2, 4, 5 and 7): an entry the engine never
	// writes: a master with rev_nat_index 0 or an unknown protocol or scope
	// (service removed), a master with flags or affinity/algorithm bits the
	// engine would not set (rewritten), a backend with ID 0 or an unknown
	// protocol or state, or with a backend ID present in both families
	// (deleted), a slot with another rev_nat_index than its master or stray
	// bits (rewritten) or repeating a backend of an earlier slot (dropped),
	// an address of the wrong family, a revNAT entry with ID 0 or of a
	// removed frontend.
	RepairInvalidEntry RepairKind = "invalid-entry"
	// RepairSlotOrder (rule 5): slots not in state order (active,
	// terminating, quarantined), or a count/qcount that does not match the
	// slot states; slots are reordered and the master rewritten.
	RepairSlotOrder RepairKind = "slot-order"
	// RepairMember (rule 8): an lb_members entry missing or not as the
	// engine writes it for the rebuilt service (rewritten), or of no
	// rebuilt service's backend (deleted).
	RepairMember RepairKind = "member"
	// RepairAffinityMatch (rule 9): an lb_affinity_match entry missing for
	// a backend of a session-affinity service (written), or of no such
	// backend (deleted).
	RepairAffinityMatch RepairKind = "affinity-match"
	// RepairSourceRange (rules 5 and 10): a source-range entry of no
	// service whose master carries FlagSourceRange, or not as the engine
	// writes it (deleted); a service whose master carries the flag while
	// the maps hold none of its ranges (removed: the ranges are lost, and
	// rebuilding it without them would open it to every client).
	RepairSourceRange RepairKind = "source-range"
)

// String returns the kind as used in logs and metrics.
func (k RepairKind) String() string { return string(k) }

// Repair is one inconsistency found in the dumped maps and what was done
// about it.
type Repair struct {
	Kind      RepairKind
	Family    maps.Family  // the family of the map holding the entry
	ServiceID lb.ServiceID // 0 if none
	Frontend  string       // "" if none (lb.L3n4Addr String form)
	BackendID lb.BackendID // 0 if none
	Detail    string       // human sentence, lowercase
}

// Restored is the table rebuilt from a Dump, with the writes that make the
// maps equal to it and the repairs that explain them.
type Restored struct {
	// Services sorted by ID; Spec from SpecFromMaster, Backends and
	// BackendIDs in slot order.
	Services []*Service
	// OrphanRevNAT are revNAT entries of IDs no service has: leftovers of
	// a create or delete cut short by a crash, or standalone entries added
	// with RevNATAdd before the restart. They are deleted (RevNATDeletes,
	// RepairOrphanRevNAT) so that no ID leaks. Both families, v4 map first,
	// by ID.
	OrphanRevNAT []maps.RevNATEntry
	// Fixes4 and Fixes6 are the writes of each family.
	Fixes4, Fixes6 Fixes
	// Repairs sorted by kind, family, service ID, frontend, backend ID and
	// detail.
	Repairs []Repair
	// Members are the writes of lb_members and lb_affinity_match (one map
	// each for both families), applied with the family fixes: writes
	// before the slots that use them, deletes after (rules 8 and 9).
	Members MemberFixes
	// SourceRanges are the writes of the source-range maps (rule 10):
	// writes before the masters that carry FlagSourceRange, deletes after
	// the masters (the flag gone, or the service).
	SourceRanges SourceRangeFixes
}

// MemberFixes are the writes that make lb_members and lb_affinity_match
// equal to the rebuilt table. Sorted, each key once.
type MemberFixes struct {
	MemberWrites  []maps.MemberEntry
	MemberDeletes []maps.MemberKey
	MatchWrites   []maps.AffinityMatchKey
	MatchDeletes  []maps.AffinityMatchKey
}

// Writes returns the total number of entries written or deleted.
func (f *MemberFixes) Writes() int {
	return len(f.MemberWrites) + len(f.MemberDeletes) + len(f.MatchWrites) + len(f.MatchDeletes)
}

func compareMemberKey(a, b maps.MemberKey) int {
	return cmp.Or(cmp.Compare(a.RevNATIndex, b.RevNATIndex), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.BackendID, b.BackendID))
}

func (f *MemberFixes) sort() {
	slices.SortFunc(f.MemberWrites, func(a, b maps.MemberEntry) int { return compareMemberKey(a.Key, b.Key) })
	slices.SortFunc(f.MemberDeletes, compareMemberKey)
	slices.SortFunc(f.MatchWrites, compareMatchKey)
	slices.SortFunc(f.MatchDeletes, compareMatchKey)
}

func compareMatchKey(a, b maps.AffinityMatchKey) int {
	return cmp.Or(cmp.Compare(a.RevNATIndex, b.RevNATIndex), cmp.Compare(a.BackendID, b.BackendID))
}

// Fixes returns the fixes of family f.
func (r *Restored) Fixes(f maps.Family) *Fixes {
	if f == maps.IPv6 {
		return &r.Fixes6
	}
	return &r.Fixes4
}

// add appends o's fixes to f's (rule 5's two halves are joined with it).
func (f *Fixes) add(o *Fixes) {
	f.RevNATWrites = append(f.RevNATWrites, o.RevNATWrites...)
	f.MasterDeletes = append(f.MasterDeletes, o.MasterDeletes...)
	f.SlotWrites = append(f.SlotWrites, o.SlotWrites...)
	f.MasterWrites = append(f.MasterWrites, o.MasterWrites...)
	f.SlotDeletes = append(f.SlotDeletes, o.SlotDeletes...)
	f.BackendDeletes = append(f.BackendDeletes, o.BackendDeletes...)
	f.RevNATDeletes = append(f.RevNATDeletes, o.RevNATDeletes...)
}

// sort sorts every list and drops repeated keys (finish calls it).
func (f *Fixes) sort() {
	byKey := func(a, b maps.ServiceKey) int { return compareKey(a, b) }
	byEntry := func(a, b maps.ServiceEntry) int { return compareKey(a.Key, b.Key) }
	byRevNAT := func(a, b maps.RevNATEntry) int { return cmp.Compare(a.ID, b.ID) }
	slices.SortFunc(f.RevNATWrites, byRevNAT)
	slices.SortFunc(f.MasterDeletes, byKey)
	f.MasterDeletes = slices.Compact(f.MasterDeletes)
	slices.SortFunc(f.SlotWrites, byEntry)
	slices.SortFunc(f.MasterWrites, byEntry)
	slices.SortFunc(f.SlotDeletes, byKey)
	f.SlotDeletes = slices.Compact(f.SlotDeletes)
	slices.Sort(f.BackendDeletes)
	f.BackendDeletes = slices.Compact(f.BackendDeletes)
	slices.Sort(f.RevNATDeletes)
	f.RevNATDeletes = slices.Compact(f.RevNATDeletes)
}

// Repair details.

func addrPort(v maps.RevNATValue) string {
	if !v.Address.IsValid() {
		return "invalid address:" + strconv.Itoa(int(v.Port))
	}
	return lb.L3n4Addr{Addr: v.Address, Port: v.Port}.AddrPort().String()
}

// plural returns "slot 3" or "slots 1-2, 5".
func plural(noun string, n int, list string) string {
	if n == 1 {
		return noun + " " + list
	}
	return noun + "s " + list
}

func slotList(ss []uint16) string {
	ints := make([]int, len(ss))
	for i, s := range ss {
		ints[i] = int(s)
	}
	return rangeList(ints)
}

// rangeList formats ascending integers as "1-3, 5".
func rangeList(xs []int) string {
	var b strings.Builder
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(xs[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(xs[j]))
		}
		i = j + 1
	}
	return b.String()
}
