package actors

import (
	"github.com/actorlb/actorlb/maps"
	"github.com/asynkron/protoactor-go/actor"
)

// newSourceRangeActor owns lb4_source_range and lb6_source_range: one map
// owner (mapActor) over a pair of mirrors, each key going to its family's.
// The core writes a service's ranges before the master that carries
// FlagSourceRange and deletes them after the master no longer does.
func newSourceRangeActor(m4, m6 maps.SourceRangeMap) actor.Producer {
	return func() actor.Actor {
		return &mapActor[maps.SourceRangeKey, maps.SourceRangeKey]{name: "srcrange", mirror: &familyMirrors{
			v4: newSourceRangeMirror(m4),
			v6: newSourceRangeMirror(m6),
		}}
	}
}

func newSourceRangeMirror(m maps.SourceRangeMap) *mirror[maps.SourceRangeKey, maps.SourceRangeKey, struct{}] {
	return newMirror(maps.Map[maps.SourceRangeKey, maps.SourceRangeKey](m),
		func(k maps.SourceRangeKey) (maps.SourceRangeKey, struct{}) { return k, struct{}{} },
		func(k maps.SourceRangeKey, _ struct{}) maps.SourceRangeKey { return k })
}

// familyMirrors is a mirrorOf over one map per family, for a family whose
// keys name their family (maps.SourceRangeKey).
type familyMirrors struct {
	v4, v6 *mirror[maps.SourceRangeKey, maps.SourceRangeKey, struct{}]
}

func (p *familyMirrors) load() error {
	if err := p.v4.load(); err != nil {
		return err
	}
	return p.v6.load()
}

func (p *familyMirrors) index() {
	p.v4.index()
	p.v6.index()
}

// split sorts keys by family.
func splitFamilies(ks []maps.SourceRangeKey) (v4, v6 []maps.SourceRangeKey) {
	for _, k := range ks {
		if k.Family() == maps.IPv6 {
			v6 = append(v6, k)
		} else {
			v4 = append(v4, k)
		}
	}
	return v4, v6
}

// apply writes then deletes the IPv4 keys, then the IPv6 ones.
func (p *familyMirrors) apply(writes, deletes []maps.SourceRangeKey) (int, int, error) {
	w4, w6 := splitFamilies(writes)
	d4, d6 := splitFamilies(deletes)
	w, d, err := p.v4.apply(w4, d4)
	if err != nil {
		return w, d, err
	}
	w2, d2, err := p.v6.apply(w6, d6)
	return w + w2, d + d2, err
}

func (p *familyMirrors) dump() maps.Entries[maps.SourceRangeKey] {
	a, b := p.v4.dump(), p.v6.dump()
	out := make([]maps.SourceRangeKey, 0, a.Len()+b.Len())
	for k := range a.All() {
		out = append(out, k)
	}
	for k := range b.All() {
		out = append(out, k)
	}
	return maps.EntriesOf(out)
}

// beginCheck begins a drift check of both maps.
func (p *familyMirrors) beginCheck() driftCheck {
	return pairCheck{p.v4.beginCheck(), p.v6.beginCheck()}
}
