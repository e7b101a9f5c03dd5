package engine

import (
	"encoding/binary"
	"net/netip"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// The table keeps its services compact: a service as the ops work on it
// (table.Service: the user's lb.Service and the backend IDs) takes about
// 600 bytes with ten backends, in four allocations with pointers; its
// stored form takes 56 bytes in a chunk of the table, 8 in its ID map
// and 16 bytes per backend (28 when kept wide, below) in one allocation
// without pointers. An op reads a service whole (svcTable.get: a copy of
// its own, which it may keep and change); the table's own lookups
// (frontend, source, scopes, the backend keys to unindex) read the
// stored form in place.
//
// A stored service's backends are words of 4 bytes, in one of two
// layouts (the service's svcWide flag tells which):
//
//   - packed, 4 words a backend: the backend's key as the backend
//     index's packer packs it (2 words: IPv4 keys always pack, IPv6 ones
//     whose /104 prefix the packer has learnt), the backend ID, and
//     weight<<16 | state<<8 | flags;
//   - wide, 7 words: the address (4 words, As16), port<<16 | protocol,
//     the ID, and weight<<16 | state<<8 | flags.
//
// A service is packed when all its backends' keys pack. The packer never
// forgets a prefix, so a packed key always unpacks.

const (
	packedWords = 4
	wideWords   = 7
)

// Flags of a stored backend.
const (
	beNodeLocal     = 1 << iota
	beScopeInternal // the backend's scope, meaningless but kept as given
)

// storedBackend is a stored backend decoded (storedService.backend).
type storedBackend struct {
	key    addrkey.Backend
	id     lb.BackendID
	weight uint16
	state  lb.BackendState
	flags  uint8 // beNodeLocal, beScopeInternal
}

func backendFlags(b lb.Backend) uint8 {
	var f uint8
	if b.NodeLocal {
		f |= beNodeLocal
	}
	if b.Scope == lb.ScopeInternal {
		f |= beScopeInternal
	}
	return f
}

// attrWord is the last word of a stored backend, in both layouts:
// weight<<16 | state<<8 | flags.
func attrWord(b lb.Backend) uint32 {
	return uint32(b.Weight)<<16 | uint32(b.State)<<8 | uint32(backendFlags(b))
}

// decodeBackend returns the backend with key and id whose last word is
// attr (attrWord).
func decodeBackend(key addrkey.Backend, id, attr uint32) storedBackend {
	return storedBackend{key: key, id: lb.BackendID(id), weight: uint16(attr >> 16), state: lb.BackendState(attr >> 8), flags: uint8(attr)}
}

// backend returns the backend as the user gave it.
func (b *storedBackend) backend() lb.Backend {
	out := lb.Backend{
		L3n4Addr:  b.key.L3n4(),
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

// encodeBackends returns the words of backends bs with ids, packed if
// every key packs (p learns their prefixes while it has room), and
// whether they are wide. Nil for no backend.
func encodeBackends(p *addrkey.BackendPacker, bs []lb.Backend, ids []lb.BackendID) (words []uint32, wide bool) {
	if len(bs) == 0 {
		return nil, false
	}
	words = make([]uint32, 0, packedWords*len(bs))
	for i, b := range bs {
		k, ok := p.Learn(addrkey.BackendOf(table.BackendKey(b)))
		if !ok {
			wide = true
			break
		}
		words = append(words, uint32(k>>32), uint32(k), uint32(ids[i]), attrWord(b))
	}
	if !wide {
		return words, false
	}
	words = make([]uint32, 0, wideWords*len(bs))
	for i, b := range bs {
		a := b.Addr.As16()
		words = append(words,
			binary.BigEndian.Uint32(a[0:]), binary.BigEndian.Uint32(a[4:]), binary.BigEndian.Uint32(a[8:]), binary.BigEndian.Uint32(a[12:]),
			uint32(b.Port)<<16|uint32(b.Protocol)<<8, uint32(ids[i]), attrWord(b))
	}
	return words, true
}

// storedService is a service as the table keeps it (see above): 56 bytes.
// Its source ranges, which few services have, are kept beside the table
// (svcTable.ranges). The zero value is a free place of a chunk (no
// service has ID 0).
type storedService struct {
	fe      [16]byte
	port    uint16
	id      lb.ServiceID
	timeout uint32 // SessionAffinityTimeout
	proto   lb.L4Type
	scope   lb.Scope
	typ     lb.ServiceType
	algo    lb.LBAlgorithm
	source  lb.Source
	flags   uint8    // svcIPv6 ... svcWide
	words   []uint32 // the backends (see above)
}

const (
	svcIPv6 = 1 << iota
	svcExtLocal
	svcIntLocal
	svcAffinity
	svcDSR
	svcRangesDeny
	svcWide // the backends' words are in the wide layout
)

// nbe returns the number of backends of s.
func (s *storedService) nbe() int {
	if s.flags&svcWide != 0 {
		return len(s.words) / wideWords
	}
	return len(s.words) / packedWords
}

// backend decodes backend i of s (p: the packer that packed it).
func (s *storedService) backend(p *addrkey.BackendPacker, i int) storedBackend {
	if s.flags&svcWide == 0 {
		w := s.words[packedWords*i:][:packedWords]
		return decodeBackend(p.Unpack(uint64(w[0])<<32|uint64(w[1])), w[2], w[3])
	}
	w := s.words[wideWords*i:][:wideWords]
	var a [16]byte
	for j := range 4 {
		binary.BigEndian.PutUint32(a[4*j:], w[j])
	}
	return decodeBackend(addrkey.BackendFrom16(a, uint16(w[4]>>16), lb.L4Type(w[4]>>8)), w[5], w[6])
}

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

// svcChunkBits sizes the chunks the table keeps its services in: 256
// services (14 KB: exactly a size class of the Go heap) each.
const svcChunkBits = 8

type svcChunk [1 << svcChunkBits]storedService

// svcTable is the table's services by ID, stored compact: in chunks of
// places, with an index from service ID to place (placeIndex). The
// allocator hands service IDs out from a cursor that wraps around, so the
// IDs in use spread over the whole space with time: places are handed
// out densely whatever the IDs (a freed place is the next one used), and
// a service costs about 70 bytes however its ID was chosen. The chunks
// are not given back: the table keeps the places of its largest size
// (at most 3.5 MB, for 65,535 services), and reuses them.
type svcTable struct {
	packer *addrkey.BackendPacker // the backend index's: one set of keys
	place  placeIndex
	chunks []*svcChunk
	free   []uint32                        // places freed, used first (last freed first)
	used   uint32                          // places handed out from the chunks, freed or not
	ranges map[lb.ServiceID][]netip.Prefix // the source ranges of the services that have them
}

// placePageBits sizes the pages of a placeIndex: 1,024 IDs (4 KB) each.
const placePageBits = 10

// placeIndex is the place of each service ID: an array by ID, in pages
// made when an ID of theirs is first set and dropped when their last one
// is deleted. A service ID is 16 bits, so there are at most 64 pages (256
// KB, IDs spread over the whole space); IDs handed out in order share
// their pages (10,000 services: 40 KB), and finding a place is one array
// read, where a map from ID to place hashed the ID and probed a table of
// some 16 bytes a service. The last page dropped is kept as the next one
// made (spare, all zero): a table of a few services created and deleted
// in turn empties its page again and again, and made a new one each time
// (4 KB, every few calls).
type placeIndex struct {
	pages [(lb.MaxServiceID + 1) >> placePageBits]*placePage
	used  [(lb.MaxServiceID + 1) >> placePageBits]uint16 // IDs set in each page
	spare *placePage
	n     int
}

// placePage holds a place plus one for each ID of its range; 0: no service.
type placePage [1 << placePageBits]uint32

// get returns the place of id and whether id has one.
func (x *placeIndex) get(id lb.ServiceID) (uint32, bool) {
	pg := x.pages[id>>placePageBits]
	if pg == nil {
		return 0, false
	}
	if p := pg[id&(1<<placePageBits-1)]; p != 0 {
		return p - 1, true
	}
	return 0, false
}

// set gives id the place p.
func (x *placeIndex) set(id lb.ServiceID, p uint32) {
	i := id >> placePageBits
	pg := x.pages[i]
	if pg == nil {
		if pg, x.spare = x.spare, nil; pg == nil {
			pg = new(placePage)
		}
		x.pages[i] = pg
	}
	e := &pg[id&(1<<placePageBits-1)]
	if *e == 0 {
		x.used[i]++
		x.n++
	}
	*e = p + 1
}

// del takes id's place away, if it has one.
func (x *placeIndex) del(id lb.ServiceID) {
	i := id >> placePageBits
	pg := x.pages[i]
	if pg == nil || pg[id&(1<<placePageBits-1)] == 0 {
		return
	}
	pg[id&(1<<placePageBits-1)] = 0
	x.n--
	if x.used[i]--; x.used[i] == 0 {
		x.spare, x.pages[i] = pg, nil // every place of it is 0 again
	}
}

// all yields every ID that has a place, and its place, in ID order.
func (x *placeIndex) all(yield func(lb.ServiceID, uint32) bool) {
	for i, pg := range x.pages {
		if pg == nil {
			continue
		}
		for j, p := range pg {
			if p != 0 && !yield(lb.ServiceID(i<<placePageBits|j), p-1) {
				return
			}
		}
	}
}

func (t *svcTable) at(place uint32) *storedService {
	return &t.chunks[place>>svcChunkBits][place&(1<<svcChunkBits-1)]
}

// len returns the number of services.
func (t *svcTable) len() int { return t.place.n }

// stored returns the stored form of service id, nil if there is none. It
// is valid until the service is put or deleted.
func (t *svcTable) stored(id lb.ServiceID) *storedService {
	p, ok := t.place.get(id)
	if !ok {
		return nil
	}
	return t.at(p)
}

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
	spec.Backends = t.backends(s, nil)
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
	var bes []lb.Backend
	var ids []lb.BackendID
	return t.expandInto(s, &table.Service{}, &bes, &ids)
}

// backends returns s's backends as the user gave them (nil for none),
// and fills ids (nil, or one per backend) with their IDs.
func (t *svcTable) backends(s *storedService, ids []lb.BackendID) []lb.Backend {
	n := s.nbe()
	if n == 0 {
		return nil
	}
	out := make([]lb.Backend, n)
	t.fillBackends(s, out, ids)
	return out
}

// fillBackends fills out (one per backend) with s's backends and ids
// (nil, or one per backend) with their IDs.
func (t *svcTable) fillBackends(s *storedService, out []lb.Backend, ids []lb.BackendID) {
	for i := range out {
		b := s.backend(t.packer, i)
		out[i] = b.backend()
		if ids != nil {
			ids[i] = b.id
		}
	}
}

// expandInto is expand into dst, the backends and their IDs in the arrays
// of *bes and *ids (made anew when short, and kept there): for a single
// call's op, reused once complete (opPool), which reads the service it
// replaces or deletes and keeps nothing of it past its end.
func (t *svcTable) expandInto(s *storedService, dst *table.Service, bes *[]lb.Backend, ids *[]lb.BackendID) *table.Service {
	*dst = table.Service{Spec: t.specOf(s)}
	n := s.nbe()
	if n == 0 {
		return dst
	}
	if cap(*bes) < n {
		*bes = make([]lb.Backend, n)
	}
	if cap(*ids) < n {
		*ids = make([]lb.BackendID, n)
	}
	dst.Spec.Backends, dst.BackendIDs = (*bes)[:n], (*ids)[:n]
	t.fillBackends(s, dst.Spec.Backends, dst.BackendIDs)
	return dst
}

// put stores svc (replacing the service of its ID). svc is not kept: the
// caller may change it afterwards. A service without backends comes back
// with nil slices.
func (t *svcTable) put(svc *table.Service) {
	id := svc.ID()
	p, ok := t.place.get(id)
	if !ok {
		p = t.newPlace()
		t.place.set(id, p)
	}
	s := t.at(p)
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
	var wide bool
	s.words, wide = encodeBackends(t.packer, spec.Backends, svc.BackendIDs)
	if wide {
		s.flags |= svcWide
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

// newPlace returns a place for a service: the last one freed, or the
// next of the chunks (a chunk is added when they are full).
func (t *svcTable) newPlace() uint32 {
	if n := len(t.free); n > 0 {
		p := t.free[n-1]
		t.free = t.free[:n-1]
		return p
	}
	if t.used == uint32(len(t.chunks))<<svcChunkBits {
		t.chunks = append(t.chunks, new(svcChunk))
	}
	t.used++
	return t.used - 1
}

// delete removes service id, if present.
func (t *svcTable) delete(id lb.ServiceID) {
	p, ok := t.place.get(id)
	if !ok {
		return
	}
	*t.at(p) = storedService{}
	t.place.del(id)
	delete(t.ranges, id)
	t.free = append(t.free, p)
}

// all yields the services, stored, in no particular order (valid until
// the next put or delete: do not change the table while iterating).
func (t *svcTable) all(yield func(lb.ServiceID, *storedService) bool) {
	for p := range t.used {
		if s := t.at(p); s.id != 0 && !yield(s.id, s) {
			return
		}
	}
}
