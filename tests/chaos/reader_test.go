package chaos

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// reader walks the maps the way the datapath does — master, then each
// slot, then its backend — and records a violation when a slot or backend
// is missing although what pointed to it did not change meanwhile.
type reader struct {
	done       chan struct{}
	wg         sync.WaitGroup
	walks      atomic.Int64
	violations chan string
}

func startReader(tb testing.TB, m *maps.LBMaps) *reader {
	r := &reader{done: make(chan struct{}), violations: make(chan string, 16)}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		deadline := time.Now().Add(time.Hour) // bounded; stop() ends it
		for time.Now().Before(deadline) {
			select {
			case <-r.done:
				return
			default:
			}
			for _, f := range []maps.Family{maps.IPv4, maps.IPv6} {
				if v := walk(m, f); v != "" {
					select {
					case r.violations <- v:
					default:
					}
				}
			}
			r.walks.Add(1)
		}
	}()
	return r
}

func (r *reader) stop(tb testing.TB) {
	close(r.done)
	r.wg.Wait()
	close(r.violations)
	for v := range r.violations {
		tb.Errorf("datapath reader: %s", v)
	}
}

func walk(m *maps.LBMaps, f maps.Family) string {
	entries, err := m.Services(f).Dump()
	if err != nil {
		return fmt.Sprintf("dump: %v", err)
	}
	for _, e := range entries {
		if e.Key.Slot != 0 {
			continue
		}
		// Writes to the service map since the master was read: a master
		// rewritten to the value it had (A -> B -> A) looks unchanged
		// while B's slots come and go; only a master nobody rewrote can
		// vouch for its slots.
		written := m.Services(f).Counters().Updated
		master, ok, err := m.Services(f).Lookup(e.Key)
		if err != nil || !ok {
			continue // deleted since the dump
		}
		n := int(master.Value.Count) + int(master.Value.QCount)
		for s := 1; s <= n; s++ {
			k := e.Key
			k.Slot = uint16(s)
			slot, ok, err := m.Services(f).Lookup(k)
			if err != nil {
				return fmt.Sprintf("lookup slot: %v", err)
			}
			if !ok {
				again, ok2, _ := m.Services(f).Lookup(e.Key)
				if ok2 && again == master && m.Services(f).Counters().Updated == written {
					return fmt.Sprintf("%s: master %+v unchanged but slot %d missing", e.Key, master.Value, s)
				}
				break
			}
			_, ok, err = m.Backends(f).Lookup(slot.Value.BackendID)
			if err != nil {
				return fmt.Sprintf("lookup backend: %v", err)
			}
			if !ok {
				again, ok2, _ := m.Services(f).Lookup(k)
				if ok2 && again == slot && m.Services(f).Counters().Updated == written {
					return fmt.Sprintf("%s: slot %d unchanged but backend %d missing", e.Key, s, slot.Value.BackendID)
				}
			}
		}
	}
	return ""
}

// requireMapsEqual checks that the maps hold exactly the services listed:
// each master with its slots in order, each slot's backend with the
// listed address and state, one revNAT per service, no other entry.
func requireMapsEqual(t *testing.T, m *maps.LBMaps, list []*lb.Service) {
	t.Helper()
	masters, revs := 0, 0
	backends := map[string]uint32{}
	for _, f := range []maps.Family{maps.IPv4, maps.IPv6} {
		es, err := m.Services(f).Dump()
		require.NoError(t, err)
		for _, x := range es {
			if x.Key.Slot == 0 {
				masters++
			}
		}
		bs, err := m.Backends(f).Dump()
		require.NoError(t, err)
		for _, b := range bs {
			a := fmt.Sprintf("%s/%d", netip.AddrPortFrom(b.Value.Address, b.Value.Port), b.Value.Proto)
			_, dup := backends[a]
			require.False(t, dup, "backend %s under two IDs", a)
			backends[a] = b.ID
		}
		rs, err := m.RevNAT(f).Dump()
		require.NoError(t, err)
		revs += len(rs)
	}
	require.Equal(t, len(list), masters, "masters")
	require.Equal(t, len(list), revs, "revNAT entries")
	used := map[uint32]bool{}
	slots := 0
	for _, svc := range list {
		fe := svc.Frontend.L3n4Addr
		f := maps.FamilyOf(fe.Addr)
		key := maps.ServiceKey{Address: fe.Addr, Port: fe.Port, Proto: uint8(fe.Protocol), Scope: uint8(fe.Scope)}
		master, ok, err := m.Services(f).Lookup(key)
		require.NoError(t, err)
		require.True(t, ok, "master of %s", fe)
		require.Equal(t, uint16(svc.Frontend.ID), master.Value.RevNATIndex)
		n := int(master.Value.Count) + int(master.Value.QCount)
		require.Equal(t, len(svc.Backends), n, "slots of %s (no maintenance backends in chaos)", fe)
		for i, b := range svc.Backends {
			key.Slot = uint16(i + 1)
			slot, ok, err := m.Services(f).Lookup(key)
			require.NoError(t, err)
			require.True(t, ok, "slot %d of %s", i+1, fe)
			be, ok, err := m.Backends(f).Lookup(slot.Value.BackendID)
			require.NoError(t, err)
			require.True(t, ok, "backend of slot %d of %s", i+1, fe)
			require.Equal(t, b.Addr, be.Value.Address)
			require.Equal(t, b.Port, be.Value.Port)
			require.Equal(t, uint8(b.State), be.Value.State)
			used[slot.Value.BackendID] = true
			slots++
		}
		rn, ok, err := m.RevNAT(f).Lookup(uint16(svc.Frontend.ID))
		require.NoError(t, err)
		require.True(t, ok, "revNAT of %s", fe)
		require.Equal(t, fe.Addr, rn.Value.Address)
	}
	require.Len(t, backends, len(used), "no orphan backends")
	_ = slots
}
