package actorlb

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

func TestSync(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	a := mustService(t, "10.96.0.10:80", "10.0.1.5:8080")
	b := mustService(t, "10.96.0.11:80", "10.0.1.5:8080", "10.0.1.6:8080")
	c := mustService(t, "[fd00::c]:80", "[fd00::1:5]:8080")
	res, err := e.Sync(ctx, []*lb.Service{a, b, c})
	require.NoError(t, err)
	require.Equal(t, SyncResult{Upserted: 3}, res)
	require.NoError(t, e.RevNATAdd(ctx, 50, lb.L3n4Addr{Addr: netip.MustParseAddr("10.96.9.9"), Port: 53}))

	res, err = e.Sync(ctx, []*lb.Service{b})
	require.NoError(t, err)
	require.Equal(t, SyncResult{Upserted: 1, Deleted: 2}, res)
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, b.Frontend.L3n4Addr, list[0].Frontend.L3n4Addr)
	revs, err := e.RevNATDump(ctx)
	require.NoError(t, err)
	require.Len(t, revs, 1, "the standalone revNAT entry was not desired")
	checkInvariants(t, e)

	// Invalid desired sets change nothing.
	before := dumpAll(t, e)
	_, err = e.Sync(ctx, []*lb.Service{b, mustService(t, "10.96.0.11:80", "10.0.1.7:8080")})
	require.EqualError(t, err, "sync: service 1: invalid sync: frontend 10.96.0.11:80/TCP also in service 0")
	bad := mustService(t, "10.96.0.12:80", "10.0.1.7:8080")
	bad.Backends[0].Port = 0
	_, err = e.Sync(ctx, []*lb.Service{bad})
	require.ErrorIs(t, err, lb.ErrInvalid)
	require.ErrorContains(t, err, "sync: service 0: invalid backends[0].port")
	require.Equal(t, before, dumpAll(t, e))
}

// An upsert sent right after a sync (which is still running: it has
// services to delete) is applied after it, never deleted by it.
func TestSyncDoesNotDeleteLaterUpserts(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	for round := range 20 {
		for i := range 5 {
			_, _, err := e.Upsert(ctx, mustService(t, fmt.Sprintf("10.96.2.%d:80", i+1), "10.0.1.9:8080"))
			require.NoError(t, err)
		}
		late := mustService(t, "10.96.1.1:80", fmt.Sprintf("10.0.1.%d:8080", round+1))
		syncReply := make(chan messages.SyncReply, 1)
		upsertReply := make(chan messages.UpsertReply, 1)
		// One sender: the supervisor receives the sync first, then the upsert.
		e.sys.Root.Send(e.sup, &messages.Sync{Desired: []*lb.Service{mustService(t, "10.96.0.10:80", "10.0.1.6:8080")}, Reply: syncReply})
		e.sys.Root.Send(e.sup, &messages.Upsert{Service: late, Reply: upsertReply})
		require.NoError(t, (<-syncReply).Err)
		require.NoError(t, (<-upsertReply).Err)
		list, err := e.List(ctx)
		require.NoError(t, err)
		var fes []string
		for _, svc := range list {
			fes = append(fes, svc.Frontend.L3n4Addr.String())
		}
		require.ElementsMatch(t, []string{"10.96.0.10:80/TCP", "10.96.1.1:80/TCP"}, fes, "round %d", round)
		checkInvariants(t, e)
	}
	_, err := e.Sync(context.Background(), nil)
	require.NoError(t, err)
	checkInvariants(t, e)
}

func TestRevNAT(t *testing.T) {
	e := newEngine(t, "", Config{})
	ctx := ctxT(t)
	addr := lb.L3n4Addr{Addr: netip.MustParseAddr("fd00::99"), Port: 443}
	require.NoError(t, e.RevNATAdd(ctx, 20, addr))
	got, err := e.RevNATGet(ctx, 20)
	require.NoError(t, err)
	require.Equal(t, RevNAT{ID: 20, Address: addr}, got)
	r6, err := e.maps.RevNAT6.Dump()
	require.NoError(t, err)
	require.Len(t, r6, 1)

	// The ID is taken: a service cannot ask for it.
	svc := mustService(t, "10.96.0.10:80", "10.0.1.5:8080")
	svc.Frontend.ID = 20
	_, _, err = e.Upsert(ctx, svc)
	require.ErrorIs(t, err, ErrServiceIDInUse)
	svc.Frontend.ID = 0
	id, _, err := e.Upsert(ctx, svc)
	require.NoError(t, err)
	require.NotEqual(t, lb.ServiceID(20), id)

	err = e.RevNATAdd(ctx, id, addr)
	require.ErrorIs(t, err, ErrRevNATOwned)
	require.EqualError(t, err, "add revNAT 1: revnat entry belongs to a service 10.96.0.10:80/TCP")
	require.ErrorIs(t, e.RevNATDelete(ctx, id), ErrRevNATOwned)
	require.EqualError(t, e.RevNATDelete(ctx, 33), "delete revNAT 33: revnat entry not found")
	_, err = e.RevNATGet(ctx, 33)
	require.EqualError(t, err, "get revNAT 33: revnat entry not found")
	require.EqualError(t, e.RevNATAdd(ctx, 0, addr), `add revNAT: invalid id "0": service ID must be between 1 and 65535`)

	all, err := e.RevNATDump(ctx)
	require.NoError(t, err)
	require.Equal(t, []RevNAT{
		{ID: id, Address: lb.L3n4Addr{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80}, Service: true},
		{ID: 20, Address: addr},
	}, all)
	require.NoError(t, e.RevNATDeleteAll(ctx))
	all, err = e.RevNATDump(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1, "service entries stay")
	r6, err = e.maps.RevNAT6.Dump()
	require.NoError(t, err)
	require.Empty(t, r6)
	checkInvariants(t, e)
}
