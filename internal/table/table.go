package table

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/actorlb/actorlb/internal/maglev"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// Service is one service as the engine holds it: its spec, with
// Frontend.ID set and Backends in slot order, and the backend IDs, parallel
// to Spec.Backends.
type Service struct {
	Spec       lb.Service
	BackendIDs []lb.BackendID
}

// ID returns the service ID.
func (s *Service) ID() lb.ServiceID { return s.Spec.Frontend.ID }

// Frontend returns the frontend address.
func (s *Service) Frontend() lb.L3n4Addr { return s.Spec.Frontend.L3n4Addr }

// Family returns the map family of the service.
func (s *Service) Family() maps.Family { return FamilyOf(s.Frontend()) }

// FamilyOf returns the map family an address belongs to.
func FamilyOf(a lb.L3n4Addr) maps.Family {
	if a.IsIPv6() {
		return maps.IPv6
	}
	return maps.IPv4
}

// BackendKey is the identity of a backend across services: address, port
// and protocol (scope plays no part). One key has one backend ID.
func BackendKey(b lb.Backend) lb.L3n4Addr {
	k := b.L3n4Addr
	k.Scope = lb.ScopeExternal
	return k
}

func stateRank(s lb.BackendState) int {
	switch s {
	case lb.BackendStateActive:
		return 0
	case lb.BackendStateTerminating:
		return 1
	case lb.BackendStateQuarantined:
		return 2
	}
	return 3 // maintenance: no slot
}

// SlotOrder sorts backends into slot order, as upstream does: active, then
// terminating, then quarantined (maintenance last: they get no slot); within
// a state by address, port and protocol. ids, if not nil, is permuted along.
func SlotOrder(bs []lb.Backend, ids []lb.BackendID) {
	if slotOrdered(bs) {
		return // the common case: nothing to allocate
	}
	if slotOrderKeyed(bs, ids) {
		return
	}
	if ids == nil {
		slices.SortStableFunc(bs, compareSlot)
		return
	}
	idx := make([]int, len(bs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return compareSlot(bs[a], bs[b]) })
	permute(bs, ids, idx)
}

// keyedMax is the most backends slotOrderKeyed sorts (on the stack).
const keyedMax = 16

// orderKey is a backend's place in slot order, words compared in turn:
// in a list of IPv4 backends alone, the state's rank and the address,
// then port, protocol and scope (lowKey); in a list with an IPv6
// address, the state's rank and whether the address is IPv6, the address
// in two words (an IPv4 one in the last 32 bits), then lowKey. Keys
// compare as compareSlot compares their backends, for addresses without
// a zone (netip orders IPv4 before IPv6, each by its bytes); at is the
// backend's index.
type orderKey struct {
	w  [4]uint64
	at int
}

func (k *orderKey) less(l *orderKey) bool {
	for i := range k.w {
		if k.w[i] != l.w[i] {
			return k.w[i] < l.w[i]
		}
	}
	return false
}

// slotOrderKeyed sorts bs (and ids along, if not nil) into slot order as
// SlotOrder does, by a key per backend built once, when they are at most
// keyedMax backends with valid addresses and no zone; else it leaves them
// and returns false. With a cluster's addresses a service's backends come
// in no order (pods of many nodes), and sorting them by compareSlot,
// which copies two backends and compares their netip.Addrs at each step,
// was a fifth of the core's CPU in an upsert of such services.
func slotOrderKeyed(bs []lb.Backend, ids []lb.BackendID) bool {
	if len(bs) > keyedMax {
		return false
	}
	var keys [keyedMax]orderKey
	v4 := true
	for i := range bs {
		if !bs[i].Addr.Is4() {
			v4 = false
			break
		}
	}
	for i := range bs {
		b, k := &bs[i], &keys[i]
		rank := uint64(stateRank(b.State))
		switch {
		case v4:
			a := b.Addr.As4()
			k.w = [4]uint64{rank<<32 | uint64(binary.BigEndian.Uint32(a[:])), lowKey(b)}
		case b.Addr.Is4():
			a := b.Addr.As4()
			k.w = [4]uint64{rank << 1, 0, uint64(binary.BigEndian.Uint32(a[:])), lowKey(b)}
		case b.Addr.Is6() && b.Addr.Zone() == "":
			a := b.Addr.As16()
			k.w = [4]uint64{rank<<1 | 1, binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:]), lowKey(b)}
		default:
			return false
		}
		k.at = i
	}
	// Insertion sort, stable: a key moves past those strictly greater.
	n := len(bs)
	for i := 1; i < n; i++ {
		k, j := keys[i], i
		for ; j > 0 && k.less(&keys[j-1]); j-- {
			keys[j] = keys[j-1]
		}
		keys[j] = k
	}
	var order [keyedMax]int
	for i := range n {
		order[i] = keys[i].at
	}
	permute(bs, ids, order[:n])
	return true
}

// lowKey is the port, protocol and scope of b as a number in their order.
func lowKey(b *lb.Backend) uint64 {
	return uint64(b.Port)<<16 | uint64(b.Protocol)<<8 | uint64(b.Scope)
}

// permute puts bs, and ids if not nil, in order: the element at i
// becomes the one that was at order[i]. Up to keyedMax of them it copies
// on the stack.
func permute(bs []lb.Backend, ids []lb.BackendID, order []int) {
	var wasBuf [keyedMax]lb.Backend
	var wasIDBuf [keyedMax]lb.BackendID
	was, wasID := wasBuf[:0], wasIDBuf[:0]
	if len(bs) > keyedMax {
		was, wasID = make([]lb.Backend, 0, len(bs)), make([]lb.BackendID, 0, len(ids))
	}
	was = append(was, bs...)
	for i, j := range order {
		bs[i] = was[j]
	}
	if ids != nil {
		wasID = append(wasID, ids...)
		for i, j := range order {
			ids[i] = wasID[j]
		}
	}
}

// slotOrdered reports whether bs are in slot order (compareSlot), each
// compared with the next in place (slices.IsSortedFunc copied both into
// each comparison: 4.5% of the core's CPU in an upsert of new services).
func slotOrdered(bs []lb.Backend) bool {
	for i := 1; i < len(bs); i++ {
		a, b := &bs[i-1], &bs[i]
		if ra, rb := stateRank(a.State), stateRank(b.State); ra != rb {
			if ra > rb {
				return false
			}
			continue
		}
		if a.L3n4Addr.Compare(b.L3n4Addr) > 0 {
			return false
		}
	}
	return true
}

// compareSlot orders backends into slot order.
func compareSlot(a, b lb.Backend) int {
	return cmp.Or(cmp.Compare(stateRank(a.State), stateRank(b.State)), a.L3n4Addr.Compare(b.L3n4Addr))
}

// Counts returns the master's count and qcount for backends in slot order:
// count is the number of active backends, or of terminating ones when none
// is active; qcount the remaining slotted (non-maintenance) backends.
func Counts(bs []lb.Backend) (count, qcount uint16) {
	var active, term, quar int
	for _, b := range bs {
		switch b.State {
		case lb.BackendStateActive:
			active++
		case lb.BackendStateTerminating:
			term++
		case lb.BackendStateQuarantined:
			quar++
		}
	}
	if active > 0 {
		return uint16(active), uint16(term + quar)
	}
	return uint16(term), uint16(quar)
}

// Key returns the service map key of a frontend's slot.
func Key(fe lb.L3n4Addr, slot uint16) maps.ServiceKey {
	return maps.ServiceKey{Address: fe.Addr, Port: fe.Port, Slot: slot, Proto: uint8(fe.Protocol), Scope: uint8(fe.Scope)}
}

// ScopeKey returns the service map key of slot of fe's set at scope sc
// (the internal set of a two-scope service lives at the frontend's key with
// scope internal).
func ScopeKey(fe lb.L3n4Addr, sc lb.Scope, slot uint16) maps.ServiceKey {
	k := Key(fe, slot)
	if sc == lb.ScopeInternal {
		k.Scope = uint8(lb.ScopeInternal)
	}
	return k
}

// ScopeSet returns the backends of svc's set at scope sc, in slot order,
// and their IDs: all of them, or only the node-local ones when the set is
// local (lb.Service.ScopeLocal). The slices are svc's own when the set has
// every backend.
func ScopeSet(svc *Service, sc lb.Scope) ([]lb.Backend, []lb.BackendID) {
	if !svc.Spec.ScopeLocal(sc) {
		return svc.Spec.Backends, svc.BackendIDs
	}
	var bs []lb.Backend
	var ids []lb.BackendID
	for i, b := range svc.Spec.Backends {
		if b.NodeLocal {
			bs = append(bs, b)
			ids = append(ids, svc.BackendIDs[i])
		}
	}
	return bs, ids
}

// Master returns the master (slot 0) entry of svc's first scope.
func Master(svc *Service) maps.ServiceEntry {
	return MasterAt(svc, lb.ScopeExternal)
}

// MasterAt returns the master entry of svc's set at scope sc.
func MasterAt(svc *Service, sc lb.Scope) maps.ServiceEntry {
	bs, _ := ScopeSet(svc, sc)
	count, qcount := Counts(bs)
	flags, flags2 := svc.Spec.Flags()
	return maps.ServiceEntry{
		Key: ScopeKey(svc.Frontend(), sc, 0),
		Value: maps.ServiceValue{
			BackendID:   svc.Spec.AffinityAlgo(),
			Count:       count,
			QCount:      qcount,
			RevNATIndex: uint16(svc.ID()),
			Flags:       flags,
			Flags2:      flags2,
		},
	}
}

// Slots returns the entries of slots 1..count+qcount of svc's first scope.
func Slots(svc *Service) []maps.ServiceEntry {
	return appendSlotsAt(make([]maps.ServiceEntry, 0, len(svc.Spec.Backends)), svc, lb.ScopeExternal)
}

// SlotsAndMaster returns, for each scope of svc, its slots then its
// master: the order a service is written in (make before break).
func SlotsAndMaster(svc *Service) []maps.ServiceEntry {
	return AppendSlotsAndMaster(make([]maps.ServiceEntry, 0, ServiceEntriesMax(svc)), svc)
}

// AppendSlotsAndMaster appends SlotsAndMaster(svc) to dst.
func AppendSlotsAndMaster(dst []maps.ServiceEntry, svc *Service) []maps.ServiceEntry {
	dst = append(appendSlotsAt(dst, svc, lb.ScopeExternal), Master(svc))
	if !svc.Spec.TwoScopes() {
		return dst
	}
	return append(appendSlotsAt(dst, svc, lb.ScopeInternal), MasterAt(svc, lb.ScopeInternal))
}

// ServiceEntriesMax is an upper bound of len(SlotsAndMaster(svc)), to
// size a buffer.
func ServiceEntriesMax(svc *Service) int {
	n := len(svc.Spec.Backends) + 1
	if svc.Spec.TwoScopes() {
		n *= 2
	}
	return n
}

// appendSlotsAt appends the slot entries of svc's set at sc to dst.
func appendSlotsAt(dst []maps.ServiceEntry, svc *Service, sc lb.Scope) []maps.ServiceEntry {
	bs, ids := ScopeSet(svc, sc)
	count, qcount := Counts(bs)
	for i := range int(count) + int(qcount) {
		dst = append(dst, maps.ServiceEntry{Key: ScopeKey(svc.Frontend(), sc, uint16(i+1)), Value: slotValueOf(svc, ids, i)})
	}
	return dst
}

// slotValue is the value of svc's slot i+1 at its first scope.
func slotValue(svc *Service, i int) maps.ServiceValue {
	return slotValueOf(svc, svc.BackendIDs, i)
}

func slotValueOf(svc *Service, ids []lb.BackendID, i int) maps.ServiceValue {
	return maps.ServiceValue{BackendID: uint32(ids[i]), RevNATIndex: uint16(svc.ID())}
}

// SlotCount is the number of slots (excluding the master) svc occupies at
// its first scope.
func SlotCount(svc *Service) int {
	return SlotCountAt(svc, lb.ScopeExternal)
}

// SlotCountAt is the number of slots svc occupies at scope sc (0 at the
// internal scope of a service with one set).
func SlotCountAt(svc *Service, sc lb.Scope) int {
	if sc == lb.ScopeInternal && !svc.Spec.TwoScopes() {
		return 0
	}
	bs, _ := ScopeSet(svc, sc)
	count, qcount := Counts(bs)
	return int(count) + int(qcount)
}

// MemberEntries returns svc's lb_members entries: one per backend whose
// weight is not the default, that is node-local or in maintenance (or
// every backend, when the service's one backend set holds only node-local
// ones), the weight summary (backend ID 0) when any weight is not the
// default, and the service's record (MemberKindService) when its source
// is not SourceAPI. Most API services have none (nil).
func MemberEntries(svc *Service) []maps.MemberEntry {
	var out []maps.MemberEntry
	weighted := false
	var maxW uint16
	// With one backend set of node-local backends only, the others have
	// no slot: their entry is the record that they belong.
	allLocal := !svc.Spec.TwoScopes() && svc.Spec.ScopeLocal(lb.ScopeExternal)
	for i, b := range svc.Spec.Backends {
		var flags uint8
		if b.NodeLocal {
			flags |= maps.MemberNodeLocal
		}
		if b.State == lb.BackendStateMaintenance {
			flags |= maps.MemberMaintenance
		} else if b.Weight > maxW {
			maxW = b.Weight
		}
		if b.Weight != lb.DefaultBackendWeight {
			weighted = true
		}
		if flags != 0 || b.Weight != lb.DefaultBackendWeight || allLocal {
			out = append(out, maps.MemberEntry{
				Key:   maps.MemberKey{BackendID: uint32(svc.BackendIDs[i]), RevNATIndex: uint16(svc.ID())},
				Value: maps.MemberValue{Weight: b.Weight, Flags: flags},
			})
		}
	}
	if weighted {
		out = append(out, maps.MemberEntry{
			Key:   maps.MemberKey{RevNATIndex: uint16(svc.ID())},
			Value: maps.MemberValue{Weight: maxW},
		})
	}
	if src := svc.Spec.Source; src != lb.SourceAPI {
		out = append(out, maps.MemberEntry{
			Key:   maps.MemberKey{RevNATIndex: uint16(svc.ID()), Kind: maps.MemberKindService},
			Value: maps.MemberValue{Source: uint8(src)},
		})
	}
	return out
}

// AffinityMatches returns svc's lb_affinity_match keys: one per slotted
// backend of a service with session affinity (nil otherwise).
func AffinityMatches(svc *Service) []maps.AffinityMatchKey {
	if !svc.Spec.SessionAffinity {
		return nil
	}
	var out []maps.AffinityMatchKey
	for i, b := range svc.Spec.Backends {
		if b.State != lb.BackendStateMaintenance {
			out = append(out, maps.AffinityMatchKey{BackendID: uint32(svc.BackendIDs[i]), RevNATIndex: uint16(svc.ID())})
		}
	}
	return out
}

// BackendEntry returns the backend map entry for b with id.
func BackendEntry(b lb.Backend, id lb.BackendID) maps.BackendEntry {
	return maps.BackendEntry{ID: uint32(id), Value: maps.BackendValue{
		Address: b.Addr, Port: b.Port, Proto: uint8(b.Protocol), State: uint8(b.State),
	}}
}

// BackendEntries returns the backend map entries of svc (maintenance
// backends included: they keep their entry but get no slot).
func BackendEntries(svc *Service) []maps.BackendEntry {
	return AppendBackendEntries(make([]maps.BackendEntry, 0, len(svc.Spec.Backends)), svc)
}

// AppendBackendEntries appends BackendEntries(svc) to dst.
func AppendBackendEntries(dst []maps.BackendEntry, svc *Service) []maps.BackendEntry {
	for i, b := range svc.Spec.Backends {
		dst = append(dst, BackendEntry(b, svc.BackendIDs[i]))
	}
	return dst
}

// RevNAT returns the revNAT entry of svc.
func RevNAT(svc *Service) maps.RevNATEntry {
	fe := svc.Frontend()
	return maps.RevNATEntry{ID: uint16(svc.ID()), Value: maps.RevNATValue{Address: fe.Addr, Port: fe.Port}}
}

// SpecFromMaster rebuilds the options of a service from its master entry:
// type, traffic policies, session affinity, algorithm and DSR.
func SpecFromMaster(fe lb.L3n4Addr, v maps.ServiceValue) lb.Service {
	s := lb.Service{Frontend: lb.Frontend{L3n4Addr: fe, ID: lb.ServiceID(v.RevNATIndex)}}
	switch {
	case v.Flags2&lb.Flag2LocalRedirect != 0:
		s.Type = lb.SVCTypeLocalRedirect
	case v.Flags&lb.FlagLoadBalancer != 0:
		s.Type = lb.SVCTypeLoadBalancer
	case v.Flags&lb.FlagHostPort != 0:
		s.Type = lb.SVCTypeHostPort
	case v.Flags&lb.FlagNodePort != 0:
		s.Type = lb.SVCTypeNodePort
	case v.Flags&lb.FlagExternalIP != 0:
		s.Type = lb.SVCTypeExternalIPs
	}
	s.ExtTrafficPolicyLocal = v.Flags&lb.FlagExtLocalScope != 0
	s.IntTrafficPolicyLocal = v.Flags2&lb.Flag2IntLocalScope != 0
	if v.Flags&lb.FlagAffinity != 0 {
		s.SessionAffinity = true
		s.SessionAffinityTimeout = v.BackendID & 0xFFFFFF
	}
	s.LBAlgorithm = lb.LBAlgorithm(v.BackendID >> 24)
	s.DSR = v.Flags2&lb.Flag2FwdModeDSR != 0
	return s
}

// FrontendFromKey returns the frontend address of a service map key.
func FrontendFromKey(k maps.ServiceKey) lb.L3n4Addr {
	return lb.L3n4Addr{Addr: k.Address.Unmap(), Port: k.Port, Protocol: lb.L4Type(k.Proto), Scope: lb.Scope(k.Scope)}
}

// BackendFromValue returns the backend described by a backend map value
// (weight is not stored in the maps: it comes back as the default).
func BackendFromValue(v maps.BackendValue) lb.Backend {
	return lb.Backend{
		L3n4Addr: lb.L3n4Addr{Addr: v.Address.Unmap(), Port: v.Port, Protocol: lb.L4Type(v.Proto)},
		Weight:   lb.DefaultBackendWeight,
		State:    lb.BackendState(v.State),
	}
}

// MaglevBackends returns what svc's Maglev table is built from: the
// backends its master counts at its first scope (the active ones in slot
// order, or the terminating ones when none is active), with their IDs and
// weights. It returns nil when svc has no table: its algorithm is not
// maglev, or no counted backend has a weight above 0 (a table would be all
// zeros: the datapath falls back to its slots, which refuse as well).
func MaglevBackends(svc *Service) []maglev.Backend {
	if svc.Spec.LBAlgorithm != lb.LBAlgMaglev {
		return nil
	}
	bs, ids := ScopeSet(svc, lb.ScopeExternal)
	count, _ := Counts(bs)
	var out []maglev.Backend
	usable := false
	for i := range int(count) {
		out = append(out, maglev.Backend{Addr: BackendKey(bs[i]), ID: ids[i], Weight: bs[i].Weight})
		usable = usable || bs[i].Weight > 0
	}
	if !usable {
		return nil
	}
	return out
}
