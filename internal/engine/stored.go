package engine

import (
	"net/netip"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// The table keeps its services compact: a service as the ops work on it
// (table.Service: the user's lb.Service and the backend IDs) takes about
// 600 bytes with ten backends, in four allocations with pointers; its
// stored form takes 56 bytes in a page of the table and 28 bytes per
// backend in one allocation without pointers. An op reads a service
// whole (svcTable.get: a copy of its own, which it may keep and change);
// the table's own lookups (frontend, source, scopes, the backend keys to
// unindex) read the stored form in place.

// storedBackend is a backend of a stored service: 28 bytes, no pointer.
type storedBackend struct {
	addr   [16]byte // As16: IPv4 addresses mapped (flag beIPv6 tells them apart)
	id     lb.BackendID
	port   uint16
	weight uint16
	proto  lb.L4Type
	state  lb.BackendState
	flags  uint8 // beIPv6, beNodeLocal, beScopeInternal
}

const (
	beIPv6 = 1 << iota
	beNodeLocal
	beScopeInternal // the backend's scope, meaningless but kept as given
)

func storeBackend(b lb.Backend, id lb.BackendID) storedBackend {
	s := storedBackend{addr: b.Addr.As16(), id: id, port: b.Port, weight: b.Weight, proto: b.Protocol, state: b.State}
	if !b.Addr.Is4() {
		s.flags |= beIPv6
	}
	if b.NodeLocal {
		s.flags |= beNodeLocal
	}
	if b.Scope == lb.ScopeInternal {
		s.flags |= beScopeInternal
	}
	return s
}

// key is the backend's key in the backend index.
func (b *storedBackend) key() addrkey.Backend {
	return addrkey.BackendFrom16(b.addr, b.port, b.proto)
}

// backend returns the backend as the user gave it.
func (b *storedBackend) backend() lb.Backend {
	out := lb.Backend{
		L3n4Addr:  lb.L3n4Addr{Addr: addrOf(b.addr, b.flags&beIPv6 != 0), Port: b.port, Protocol: b.proto},
		Weight:    b.weight,
		State:     b.state,
		NodeLocal: b.flags&beNodeLocal != 0,
	}
	if b.flags&beScopeInternal != 0 {
		out.Scope = lb.ScopeInternal
	}
	return out
}

func addrOf(a [16]byte, v6 bool) netip.Addr {
	ip := netip.AddrFrom16(a)
	if !v6 {
		return ip.Unmap()
	}
	return ip
}

// storedService is a service as the table keeps it (see above): 56 bytes.
// Its source ranges, which few services have, are kept beside the table
// (svcTable.ranges). The zero value is an empty place of a page (no
// service has ID 0).
type storedService struct {
	fe       [16]byte
	port     uint16
	id       lb.ServiceID
	timeout  uint32 // SessionAffinityTimeout
	proto    lb.L4Type
	scope    lb.Scope
	typ      lb.ServiceType
	algo     lb.LBAlgorithm
	source   lb.Source
	flags    uint8 // svcIPv6 ... svcRangesDeny
	backends []storedBackend
}

const (
	svcIPv6 = 1 << iota
	svcExtLocal
	svcIntLocal
	svcAffinity
	svcDSR
	svcRangesDeny
)

func (s *storedService) frontend() lb.L3n4Addr {
	return lb.L3n4Addr{Addr: addrOf(s.fe, s.flags&svcIPv6 != 0), Port: s.port, Protocol: s.proto, Scope: s.scope}
}

// twoScopes is lb.Service.TwoScopes of the stored service.
func (s *storedService) twoScopes() bool {
	spec := lb.Service{
		Type:                  s.typ,
		ExtTrafficPolicyLocal: s.flags&svcExtLocal != 0,
		IntTrafficPolicyLocal: s.flags&svcIntLocal != 0,
	}
	return spec.TwoScopes()
}

// svcPageBits sizes the pages of the table: 256 services (14 KB) each.
const svcPageBits = 8

// svcPage is a page of the table: exactly a size class of the Go heap.
type svcPage [1 << svcPageBits]storedService

// svcTable is the table's services by ID, stored compact in pages (the
// allocator hands service IDs out in runs). A page is allocated when a
// service of its range is put and freed when its last one is deleted.
type svcTable struct {
	pages  [(1 << 16) >> svcPageBits]*svcPage
	counts [(1 << 16) >> svcPageBits]uint16 // services in each page
	n      int
	ranges map[lb.ServiceID][]netip.Prefix // the source ranges of the services that have them
}

// len returns the number of services.
func (t *svcTable) len() int { return t.n }

// stored returns the stored form of service id, nil if there is none. It
// is valid until the service is put or deleted.
func (t *svcTable) stored(id lb.ServiceID) *storedService {
	p := t.pages[id>>svcPageBits]
	if p == nil {
		return nil
	}
	s := &p[id&(1<<svcPageBits-1)]
	if s.id == 0 {
		return nil
	}
	return s
}

// has reports whether service id is in the table.
func (t *svcTable) has(id lb.ServiceID) bool { return t.stored(id) != nil }

// get returns service id whole, a copy the caller owns, or nil.
func (t *svcTable) get(id lb.ServiceID) *table.Service {
	s := t.stored(id)
	if s == nil {
		return nil
	}
	return t.expand(s)
}

// spec returns the lb.Service of service id (a copy the caller owns), or
// nil.
func (t *svcTable) spec(id lb.ServiceID) *lb.Service {
	s := t.stored(id)
	if s == nil {
		return nil
	}
	spec := t.specOf(s)
	spec.Backends = s.lbBackends()
	return &spec
}

// specOf returns s's lb.Service without its backends.
func (t *svcTable) specOf(s *storedService) lb.Service {
	spec := lb.Service{
		Frontend:               lb.Frontend{L3n4Addr: s.frontend(), ID: s.id},
		Type:                   s.typ,
		ExtTrafficPolicyLocal:  s.flags&svcExtLocal != 0,
		IntTrafficPolicyLocal:  s.flags&svcIntLocal != 0,
		SessionAffinity:        s.flags&svcAffinity != 0,
		SessionAffinityTimeout: s.timeout,
		LBAlgorithm:            s.algo,
		DSR:                    s.flags&svcDSR != 0,
		SourceRangesDeny:       s.flags&svcRangesDeny != 0,
		Source:                 s.source,
	}
	if r, ok := t.ranges[s.id]; ok {
		spec.SourceRanges = append([]netip.Prefix(nil), r...)
	}
	return spec
}

// expand returns s whole (a copy the caller owns).
func (t *svcTable) expand(s *storedService) *table.Service {
	svc := &table.Service{Spec: t.specOf(s)}
	svc.Spec.Backends = s.lbBackends()
	if len(s.backends) > 0 {
		svc.BackendIDs = make([]lb.BackendID, len(s.backends))
		for i := range s.backends {
			svc.BackendIDs[i] = s.backends[i].id
		}
	}
	return svc
}

// lbBackends returns s's backends as the user gave them (nil for none).
func (s *storedService) lbBackends() []lb.Backend {
	if len(s.backends) == 0 {
		return nil
	}
	out := make([]lb.Backend, len(s.backends))
	for i := range s.backends {
		out[i] = s.backends[i].backend()
	}
	return out
}

// put stores svc (replacing the service of its ID). svc is not kept: the
// caller may change it afterwards. A service without backends comes back
// with nil slices.
func (t *svcTable) put(svc *table.Service) {
	id := svc.ID()
	p := t.pages[id>>svcPageBits]
	if p == nil {
		p = new(svcPage)
		t.pages[id>>svcPageBits] = p
	}
	s := &p[id&(1<<svcPageBits-1)]
	if s.id == 0 {
		t.counts[id>>svcPageBits]++
		t.n++
	}
	spec := &svc.Spec
	fe := spec.Frontend.L3n4Addr
	*s = storedService{
		fe: fe.Addr.As16(), port: fe.Port, id: id, timeout: spec.SessionAffinityTimeout,
		proto: fe.Protocol, scope: fe.Scope, typ: spec.Type, algo: spec.LBAlgorithm, source: spec.Source,
	}
	for _, f := range [...]struct {
		on  bool
		bit uint8
	}{
		{!fe.Addr.Is4(), svcIPv6},
		{spec.ExtTrafficPolicyLocal, svcExtLocal},
		{spec.IntTrafficPolicyLocal, svcIntLocal},
		{spec.SessionAffinity, svcAffinity},
		{spec.DSR, svcDSR},
		{spec.SourceRangesDeny, svcRangesDeny},
	} {
		if f.on {
			s.flags |= f.bit
		}
	}
	if len(spec.Backends) > 0 {
		s.backends = make([]storedBackend, len(spec.Backends))
	}
	for i, b := range spec.Backends {
		s.backends[i] = storeBackend(b, svc.BackendIDs[i])
	}
	switch {
	case len(spec.SourceRanges) > 0:
		if t.ranges == nil {
			t.ranges = map[lb.ServiceID][]netip.Prefix{}
		}
		t.ranges[id] = append([]netip.Prefix(nil), spec.SourceRanges...)
	case t.ranges != nil:
		delete(t.ranges, id)
	}
}

// delete removes service id, if present.
func (t *svcTable) delete(id lb.ServiceID) {
	p := t.pages[id>>svcPageBits]
	if p == nil {
		return
	}
	s := &p[id&(1<<svcPageBits-1)]
	if s.id == 0 {
		return
	}
	*s = storedService{}
	delete(t.ranges, id)
	t.n--
	if t.counts[id>>svcPageBits]--; t.counts[id>>svcPageBits] == 0 {
		t.pages[id>>svcPageBits] = nil
	}
}

// all yields the services in ID order, stored (valid until the next put
// or delete: do not change the table while iterating).
func (t *svcTable) all(yield func(lb.ServiceID, *storedService) bool) {
	for _, p := range t.pages {
		if p == nil {
			continue
		}
		for i := range p {
			if s := &p[i]; s.id != 0 && !yield(s.id, s) {
				return
			}
		}
	}
}
