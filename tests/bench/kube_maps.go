package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// mapProbe reads the engine's pinned maps through handles of its own, to
// tell when a frontend's entries are what its translation says.
type mapProbe struct{ lbm *maps.LBMaps }

func openMapProbe(root string, sizes maps.Sizes) (*mapProbe, error) {
	lbm, err := maps.Open(maps.Config{Root: root, MaxEntries: sizes})
	if err != nil {
		return nil, fmt.Errorf("open map probe: %w", err)
	}
	return &mapProbe{lbm: lbm}, nil
}

func (p *mapProbe) Close() error { return p.lbm.Close() }

// right reports whether the maps hold want for fe: with want nil, no
// master entry; else a master entry whose count+qcount slots name backends
// equal, as a multiset of address, port, protocol and state, to want's
// (external scope: the bench's services have no traffic policy).
func (p *mapProbe) right(fe lb.L3n4Addr, want []lb.Backend) (bool, error) {
	fam := maps.FamilyOf(fe.Addr)
	svcs, bes := p.lbm.Services(fam), p.lbm.Backends(fam)
	master, ok, err := svcs.Lookup(table.ScopeKey(fe, lb.ScopeExternal, 0))
	if err != nil {
		return false, err
	}
	if want == nil || !ok {
		return want == nil && !ok, nil
	}
	n := int(master.Value.Count) + int(master.Value.QCount)
	if n != len(want) {
		return false, nil
	}
	got := make([]maps.BackendValue, 0, n)
	for slot := 1; slot <= n; slot++ {
		s, ok, err := svcs.Lookup(table.ScopeKey(fe, lb.ScopeExternal, uint16(slot)))
		if err != nil || !ok {
			return false, err
		}
		b, ok, err := bes.Lookup(s.Value.BackendID)
		if err != nil || !ok {
			return false, err
		}
		got = append(got, b.Value)
	}
	exp := make([]maps.BackendValue, len(want))
	for i, b := range want {
		exp[i] = table.BackendEntry(b, 0).Value
	}
	order := func(a, b maps.BackendValue) int {
		if c := a.Address.Compare(b.Address); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	}
	slices.SortFunc(got, order)
	slices.SortFunc(exp, order)
	return slices.Equal(got, exp), nil
}

// waitRight polls right every interval until it holds, and returns when it
// was first seen to hold. It gives up after timeout.
func (p *mapProbe) waitRight(ctx context.Context, fe lb.L3n4Addr, want []lb.Backend, interval, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := p.right(fe, want)
		now := time.Now()
		if err != nil {
			return now, fmt.Errorf("poll maps for %s: %w", fe, err)
		}
		if ok {
			return now, nil
		}
		if now.After(deadline) {
			return now, fmt.Errorf("poll maps for %s: not right after %s (want %d backends)", fe, timeout, len(want))
		}
		if ctx.Err() != nil {
			return now, ctx.Err()
		}
		time.Sleep(interval)
	}
}
