package actorlb

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

func prefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func rangedService(t *testing.T, fe string, backend string, ranges ...string) *lb.Service {
	t.Helper()
	s := mustService(t, fe, backend)
	s.Type = lb.SVCTypeLoadBalancer
	s.SourceRanges = prefixes(ranges...)
	return s
}

// rangeKeys reads both source-range maps, as "id prefix" lines.
func rangeKeys(t *testing.T, e *Engine) []string {
	t.Helper()
	var out []string
	for _, m := range []maps.SourceRangeMap{e.maps.SourceRange4, e.maps.SourceRange6} {
		ks, err := m.Dump()
		require.NoError(t, err)
		for _, k := range ks {
			p, ok := k.Prefix()
			require.True(t, ok, "%s", k)
			out = append(out, p.String()+" of "+itoa(int(k.RevNATIndex)))
		}
	}
	slices.Sort(out)
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// A service with source ranges gets exactly its LPM entries (v4 and v6,
// allow and deny lists), Get and List return the ranges; changing them
// adds and removes exactly the difference; deleting the service removes
// them.
func TestSourceRangesFollowTheService(t *testing.T) {
	testutil.Privileged(t)
	e := newEngine(t, testutil.PinDir(t), Config{})
	ctx := ctxT(t)
	s4 := rangedService(t, "203.0.113.1:443", "10.0.1.5:8443", "192.0.2.0/24", "10.0.0.0/8")
	id4, _, err := e.Upsert(ctx, s4)
	require.NoError(t, err)
	s6 := rangedService(t, "[2001:db8::1]:443", "[fd00::1:5]:8443", "2001:db8:bad::/48")
	s6.SourceRangesDeny = true
	id6, _, err := e.Upsert(ctx, s6)
	require.NoError(t, err)
	plain, _, err := e.Upsert(ctx, mustService(t, "10.96.0.9:80", "10.0.1.5:8080"))
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8 of " + itoa(int(id4)), "192.0.2.0/24 of " + itoa(int(id4)), "2001:db8:bad::/48 of " + itoa(int(id6))}, rangeKeys(t, e))

	got, err := e.Get(ctx, id4)
	require.NoError(t, err)
	require.Equal(t, prefixes("10.0.0.0/8", "192.0.2.0/24"), got.SourceRanges, "in the engine's order")
	require.False(t, got.SourceRangesDeny)
	got, err = e.Get(ctx, id6)
	require.NoError(t, err)
	require.Equal(t, prefixes("2001:db8:bad::/48"), got.SourceRanges)
	require.True(t, got.SourceRangesDeny)
	all, err := e.List(ctx)
	require.NoError(t, err)
	for _, s := range all {
		if s.Frontend.ID == plain {
			require.Nil(t, s.SourceRanges)
		}
	}
	master, ok, err := e.maps.Service4.Lookup(maps.ServiceKey{Address: s4.Frontend.Addr, Port: 443, Proto: 6})
	require.NoError(t, err)
	require.True(t, ok)
	require.NotZero(t, master.Value.Flags&lb.FlagSourceRange)

	// 192.0.2.0/24 goes, 198.51.100.7/32 comes: one write, one delete.
	before := e.maps.SourceRange4.Counters()
	s4.SourceRanges = prefixes("10.0.0.0/8", "198.51.100.7/32")
	_, _, err = e.Upsert(ctx, s4)
	require.NoError(t, err)
	after := e.maps.SourceRange4.Counters()
	require.Equal(t, before.Updated+1, after.Updated)
	require.Equal(t, before.Deleted+1, after.Deleted)
	require.Equal(t, []string{"10.0.0.0/8 of " + itoa(int(id4)), "198.51.100.7/32 of " + itoa(int(id4)), "2001:db8:bad::/48 of " + itoa(int(id6))}, rangeKeys(t, e))

	// No ranges: the flag and the entries go.
	s4.SourceRanges = nil
	_, _, err = e.Upsert(ctx, s4)
	require.NoError(t, err)
	master, _, err = e.maps.Service4.Lookup(maps.ServiceKey{Address: s4.Frontend.Addr, Port: 443, Proto: 6})
	require.NoError(t, err)
	require.Zero(t, master.Value.Flags&lb.FlagSourceRange)
	require.Equal(t, []string{"2001:db8:bad::/48 of " + itoa(int(id6))}, rangeKeys(t, e))

	require.NoError(t, e.Delete(ctx, id6))
	require.Empty(t, rangeKeys(t, e))
	d, err := verify.Dump(e.maps)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d))
}

// A restart restores SourceRanges and SourceRangesDeny with zero writes;
// tampered entries (a stray of a service without ranges, one of no
// service, one range removed from a service that keeps others) are seen by
// verify and repaired at restore; a service whose every range is gone is
// removed rather than opened.
func TestSourceRangesRestart(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	e := newEngine(t, root, Config{})
	ctx := ctxT(t)
	a := rangedService(t, "203.0.113.1:443", "10.0.1.5:8443", "10.0.0.0/8", "192.0.2.0/24")
	ida, _, err := e.Upsert(ctx, a)
	require.NoError(t, err)
	b := rangedService(t, "[2001:db8::1]:443", "[fd00::1:5]:8443", "2001:db8:bad::/48")
	b.SourceRangesDeny = true
	idb, _, err := e.Upsert(ctx, b)
	require.NoError(t, err)
	c := rangedService(t, "203.0.113.2:443", "10.0.1.6:8443", "172.16.0.0/12")
	idc, _, err := e.Upsert(ctx, c)
	require.NoError(t, err)
	idp, _, err := e.Upsert(ctx, mustService(t, "10.96.0.9:80", "10.0.1.5:8080"))
	require.NoError(t, err)
	wantA, err := e.Get(ctx, ida)
	require.NoError(t, err)
	wantB, err := e.Get(ctx, idb)
	require.NoError(t, err)
	require.NoError(t, e.Close())

	e = newEngine(t, root, Config{})
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Restore.Repairs)
	require.Zero(t, st.MapWrites(), "nothing changed: no map written")
	gotA, err := e.Get(ctx, ida)
	require.NoError(t, err)
	require.Equal(t, wantA, gotA)
	gotB, err := e.Get(ctx, idb)
	require.NoError(t, err)
	require.Equal(t, wantB, gotB)
	require.True(t, gotB.SourceRangesDeny)
	require.NoError(t, e.Close())

	// Tamper with the pinned maps, no agent running.
	m4, err := ebpf.LoadPinnedMap(filepath.Join(root, maps.SourceRange4Name), nil)
	require.NoError(t, err)
	put := func(k maps.SourceRangeKey) {
		raw, err := maps.MarshalSourceRange4Key(k)
		require.NoError(t, err)
		require.NoError(t, m4.Update(raw[:], []byte{1}, ebpf.UpdateAny))
	}
	del := func(k maps.SourceRangeKey) {
		raw, err := maps.MarshalSourceRange4Key(k)
		require.NoError(t, err)
		require.NoError(t, m4.Delete(raw[:]))
	}
	put(maps.SourceRangeKeyOf(uint16(idp), netip.MustParsePrefix("10.0.0.0/8"))) // a service without ranges
	put(maps.SourceRangeKeyOf(4000, netip.MustParsePrefix("10.0.0.0/8")))        // no service
	del(maps.SourceRangeKeyOf(uint16(ida), netip.MustParsePrefix("192.0.2.0/24")))
	del(maps.SourceRangeKeyOf(uint16(idc), netip.MustParsePrefix("172.16.0.0/12"))) // c's only range
	m4.Close()

	d, err := verify.DumpPinned(root)
	require.NoError(t, err)
	var kinds []string
	for _, v := range verify.Check(d) {
		require.Equal(t, 8, v.Invariant(), v.String())
		kinds = append(kinds, string(v.Kind)+" "+itoa(int(v.ServiceID)))
	}
	require.ElementsMatch(t, []string{"source-range-missing " + itoa(int(idc)), "source-range-stray " + itoa(int(idp)), "source-range-stray 4000"}, kinds)

	e = newEngine(t, root, Config{})
	st, err = e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Restore.RepairsByKind["source-range"], "%v", st.Restore.RepairsByKind)
	gotA, err = e.Get(ctx, ida)
	require.NoError(t, err)
	require.Equal(t, prefixes("10.0.0.0/8"), gotA.SourceRanges, "what the maps still hold")
	_, err = e.Get(ctx, idc)
	require.ErrorIs(t, err, ErrServiceNotFound, "removed: its ranges are lost and it must not open")
	require.Equal(t, []string{"10.0.0.0/8 of " + itoa(int(ida)), "2001:db8:bad::/48 of " + itoa(int(idb))}, rangeKeys(t, e))
	d, err = verify.Dump(e.maps)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d))
}

// The periodic reconcile puts back a range deleted under the engine and
// deletes one added, without a restart.
func TestSourceRangesReconcile(t *testing.T) {
	testutil.Privileged(t)
	root := testutil.PinDir(t)
	e := newEngine(t, root, Config{ReconcileInterval: -1})
	ctx := ctxT(t)
	s := rangedService(t, "[2001:db8::1]:443", "[fd00::1:5]:8443", "2001:db8:1::/48", "2001:db8:2::/48")
	id, _, err := e.Upsert(ctx, s)
	require.NoError(t, err)
	want := rangeKeys(t, e)

	lbm, err := maps.Open(maps.Config{Root: root})
	require.NoError(t, err)
	require.NoError(t, lbm.SourceRange6.Delete([]maps.SourceRangeKey{maps.SourceRangeKeyOf(uint16(id), netip.MustParsePrefix("2001:db8:1::/48"))}))
	require.NoError(t, lbm.SourceRange6.Update([]maps.SourceRangeKey{maps.SourceRangeKeyOf(uint16(id), netip.MustParsePrefix("::/0"))}))
	require.NoError(t, lbm.Close())
	d, err := verify.Dump(e.maps)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d), "still consistent for invariant 8, but not what the engine wrote")

	ds, err := e.Reconcile(ctx)
	require.NoError(t, err)
	got := map[string]int{}
	for _, d := range ds {
		got[d.Map] = d.Repairs()
	}
	require.Equal(t, 2, got[maps.SourceRange6Name], "%+v", ds)
	require.Equal(t, want, rangeKeys(t, e))
}
