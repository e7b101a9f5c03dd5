package engine

import "github.com/actorlb/actorlb/maps"

// Child names: the actors the engine's supervisor spawns, and the
// addresses of the requests the core sends.
const (
	ChildAllocator = "alloc"
	ChildService4  = "svc4"
	ChildService6  = "svc6"
	ChildBackend4  = "be4"
	ChildBackend6  = "be6"
	ChildRevNAT    = "revnat"
	// ChildMembers owns lb_members (weights, node-local, maintenance
	// memberships).
	ChildMembers = "members"
	// ChildAffinity owns lb_affinity_match.
	ChildAffinity = "affinity"
	// ChildMaglev owns lb4_maglev and lb6_maglev: it builds and writes
	// the Maglev tables of the services the core names.
	ChildMaglev = "maglev"
	// ChildSourceRange owns lb4_source_range and lb6_source_range: the
	// client prefixes of the services with source ranges.
	ChildSourceRange = "srcrange"
)

// Children lists the child names, in the order Ready lists requests.
var Children = []string{ChildAllocator, ChildService4, ChildService6, ChildBackend4, ChildBackend6, ChildRevNAT, ChildMembers, ChildAffinity, ChildMaglev, ChildSourceRange}

// numChildren is len(Children): the outbox has one queue per child.
const numChildren = 10

// childIndex returns the index of child in Children (a switch: every
// request is queued by it, and a string switch needs no hashing).
func childIndex(child string) int {
	switch child {
	case ChildAllocator:
		return 0
	case ChildService4:
		return 1
	case ChildService6:
		return 2
	case ChildBackend4:
		return 3
	case ChildBackend6:
		return 4
	case ChildRevNAT:
		return 5
	case ChildMembers:
		return 6
	case ChildAffinity:
		return 7
	case ChildMaglev:
		return 8
	case ChildSourceRange:
		return 9
	}
	panic("engine: unknown child " + child)
}

func svcChild(f maps.Family) string {
	if f == maps.IPv6 {
		return ChildService6
	}
	return ChildService4
}

func beChild(f maps.Family) string {
	if f == maps.IPv6 {
		return ChildBackend6
	}
	return ChildBackend4
}

// families index per-family lists: 0 IPv4, 1 IPv6.
var families = [2]maps.Family{maps.IPv4, maps.IPv6}

func famIndex(f maps.Family) int {
	if f == maps.IPv6 {
		return 1
	}
	return 0
}
