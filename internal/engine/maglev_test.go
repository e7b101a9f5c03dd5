package engine

import (
	"testing"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

func maglevSvc(t *testing.T, fe string, backends ...string) *lb.Service {
	t.Helper()
	s := svc(t, fe, backends...)
	s.LBAlgorithm = lb.LBAlgMaglev
	return s
}

// A maglev service's table inputs (its active backends, by ID) go to the
// Maglev owner beside the service write: after its backends exist, before
// the backends it drops are deleted. A change of backends sends the new
// inputs; switching the algorithm away deletes the table.
func TestScriptMaglevTableFollowsTheService(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(maglevSvc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")))
	h.expect("alloc: acquire service 10.96.0.1:80/TCP backends [10.0.1.1:8080/TCP 10.0.1.2:8080/TCP]")
	h.reply("alloc", acquired(1, 1, 2))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]", "maglev: write [1=[1 2]]")
	h.reply("svc4", ok())
	h.expectAnswers()
	h.reply("maglev", ok())
	h.expectAnswers("upsert: id 1 created true")

	// 10.0.1.2 leaves, 10.0.1.3 comes: the new table before 2 is deleted.
	h.call(upsert(maglevSvc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.3:8080")))
	h.expect("alloc: acquire backends [10.0.1.3:8080/TCP]")
	h.reply("alloc", acquired(0, 3))
	h.expect("be4: write [1=10.0.1.1:8080 3=10.0.1.3:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]", "maglev: write [1=[1 3]]")
	h.reply("svc4", ok())
	h.reply("maglev", ok())
	h.expect("be4: write [] delete [2]") // unbound at the commit
	h.reply("be4", ok())
	h.expect("alloc: unhold [2]")
	h.reply("alloc", ok())
	h.expectAnswers("upsert: id 1 created false")

	// Random now: the table goes with the service write.
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.3:8080")))
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]", "be4: write [1=10.0.1.1:8080 3=10.0.1.3:8080]", "revnat: write [1=10.96.0.1:80]", "maglev: write [] delete [1]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("svc4", ok())
	h.reply("maglev", ok())
	h.expectAnswers("upsert: id 1 created false")

	// And a service that is not maglev never reaches the Maglev owner.
	h.call(upsert(svc(t, "10.96.0.1:80", "10.0.1.1:8080")))
	h.flushAnswering(t)
	require.Empty(t, h.sent["maglev"])
	require.Len(t, h.maglevLog, 4, "only the three writes above (and the restore's sync)")
}

// The table holds the backends the master counts: the active ones with
// their weights, or the terminating ones when none is active; none with a
// weight above 0 means no table (deleted). Deleting the service deletes
// its table with its revNAT entry, before its ID can be reused.
func TestScriptMaglevTableHoldsTheCountedBackends(t *testing.T) {
	h := newHarness(t)
	s := maglevSvc(t, "[fd00::1]:443", "[fd00::a]:8443", "[fd00::b]:8443", "[fd00::c]:8443")
	s.Backends[0].Weight = 300
	s.Backends[1].State = lb.BackendStateTerminating
	h.call(upsert(s))
	h.expect("alloc: acquire service [fd00::1]:443/TCP backends [[fd00::a]:8443/TCP [fd00::c]:8443/TCP [fd00::b]:8443/TCP]") // slot order
	h.reply("alloc", acquired(7, 1, 2, 3))
	h.expect("be6: write [1=fd00::a:8443 2=fd00::c:8443 3=fd00::b:8443(terminating)]", "revnat: write [7=fd00::1:443]",
		"members: write [7/1=w300,f0 7/0=w300,f0]")
	for _, c := range []string{"be6", "revnat", "members"} {
		h.reply(c, ok())
	}
	h.flushAnswering(t)
	requireMaglev(t, h, 0, "write [7=[1*300 2]]")
	h.expectAnswers("upsert: id 7 created true")

	// No active backend: the terminating one.
	s.Backends[0].State, s.Backends[2].State = lb.BackendStateTerminating, lb.BackendStateQuarantined
	h.call(upsert(s))
	h.flushAnswering(t)
	requireMaglev(t, h, 1, "write [7=[1*300 3]]")
	h.expectAnswers("upsert: id 7 created false")

	// Weight 0 on every counted backend: no table.
	s.Backends[0].Weight, s.Backends[1].Weight = 0, 0
	h.call(upsert(s))
	h.flushAnswering(t)
	requireMaglev(t, h, 2, "write [] delete [7]")
	h.expectAnswers("upsert: id 7 created false")

	h.call(deleteFE(t, "[fd00::1]:443"))
	h.flushAnswering(t)
	requireMaglev(t, h, 3, "write [] delete [7]")
	h.expectAnswers("delete: id 7")
}

// requireMaglev checks the i-th request the Maglev owner got (the harness
// keeps what flushAnswering answered).
func requireMaglev(t *testing.T, h *harness, i int, want string) {
	t.Helper()
	got := h.maglevLog[1:] // after the restore's sync
	require.Greater(t, len(got), i, "maglev requests: %q", got)
	require.Equal(t, want, got[i], "maglev request %d of %q", i, got)
}

// A service update that fails after its table was written writes the old
// table back (a new service's is deleted).
func TestScriptMaglevRollbackRestoresTheOldTable(t *testing.T) {
	h := newHarness(t)
	create(t, h, maglevSvc(t, "10.96.0.1:80", "10.0.1.1:8080"), 1, 1)
	h.call(upsert(maglevSvc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")))
	h.expect("alloc: acquire backends [10.0.1.2:8080/TCP]")
	h.reply("alloc", acquired(0, 2))
	h.expect("be4: write [1=10.0.1.1:8080 2=10.0.1.2:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	for range 1 + mapRetries {
		h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#2 10.96.0.1:80/TCP#0]", "maglev: write [1=[1 2]]")
		h.reply("maglev", ok())
		h.reply("svc4", fail(errBusy))
	}
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=10.96.0.1:80]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect("svc4: write [10.96.0.1:80/TCP#1 10.96.0.1:80/TCP#0] delete [10.96.0.1:80/TCP#2]", "maglev: write [1=[1]]")
	h.reply("svc4", ok())
	h.reply("maglev", ok())
	h.expect("be4: write [] delete [2]") // the rollback gives back what was acquired: 2 is unbound
	h.reply("be4", ok())
	h.expect("alloc: unhold [2]")
	h.reply("alloc", ok())
	h.expectAnswers("upsert: error: upsert service 10.96.0.1:80/TCP: write service: device or resource busy")
}

// Restore sends the Maglev owner every restored maglev service's inputs
// (a sync: it deletes the other tables); reconcile sends the table's.
func TestScriptMaglevRestoreAndReconcileSendTheInputs(t *testing.T) {
	h := newIdleHarness(t)
	h.step(Start{})
	h.expect("svc4: dump", "svc6: dump", "be4: dump", "be6: dump", "revnat: dump", "members: dump", "affinity: dump", "srcrange: dump")
	s := maglevSvc(t, "10.96.0.1:80", "10.0.1.1:8080", "10.0.1.2:8080")
	s.Frontend.ID = 4
	ts := &table.Service{Spec: *s, BackendIDs: []lb.BackendID{8, 9}}
	var svcs []maps.ServiceEntry
	svcs = append(svcs, table.SlotsAndMaster(ts)...)
	h.reply("svc4", dumpedServices(svcs...))
	h.reply("svc6", dumpedServices())
	h.reply("be4", dumpedBackends(table.BackendEntries(ts)...))
	h.reply("be6", dumpedBackends())
	h.reply("revnat", func(r messages.Request) any {
		return &messages.RevNATDumped{ReqID: r.RequestID(), V4: []maps.RevNATEntry{table.RevNAT(ts)}}
	})
	h.reply("members", func(r messages.Request) any { return &messages.MapDumped[maps.MemberEntry]{ReqID: r.RequestID()} })
	h.reply("affinity", func(r messages.Request) any { return &messages.MapDumped[maps.AffinityMatchKey]{ReqID: r.RequestID()} })
	h.reply("srcrange", func(r messages.Request) any { return &messages.MapDumped[maps.SourceRangeKey]{ReqID: r.RequestID()} })
	h.expect("maglev: sync [4=[8 9]]")
	h.reply("maglev", func(r messages.Request) any {
		return &messages.MaglevApplied{ReqID: r.RequestID(), Written: 1, Deleted: 1, Repairs: 2}
	})
	h.expect("alloc: restore services [10.96.0.1:80/TCP=4×1] backends [8 9]")
	h.reply("alloc", ok())
	h.expectEvents("up")
	st := h.c.stats()
	require.Equal(t, 2, st.Restore.Repairs)
	require.Equal(t, map[string]int{"maglev-table": 2}, st.Restore.RepairsByKind)
	require.Equal(t, 2, st.Restore.Writes)

	h.call(&messages.Reconcile{Reply: make(chan messages.ReconcileReply, 1)})
	h.expect("svc4: reconcile", "svc6: reconcile", "be4: reconcile", "be6: reconcile", "revnat: reconcile", "members: reconcile", "affinity: reconcile", "maglev: reconcile [4=[8 9]]", "srcrange: reconcile")
}
