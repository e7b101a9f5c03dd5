package engine

import (
	"net/netip"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

func rangedSvc(t *testing.T, fe string, ranges ...string) *lb.Service {
	t.Helper()
	s := svc(t, fe, "10.0.1.1:8080")
	s.Type = lb.SVCTypeLoadBalancer
	for _, r := range ranges {
		s.SourceRanges = append(s.SourceRanges, netip.MustParsePrefix(r))
	}
	return s
}

// A service's source ranges are written beside its backends, before the
// master that carries FlagSourceRange; ranges it drops are deleted after
// the new master; deleting the service deletes them with its revNAT
// entry (after the master, before the ID can be reused).
func TestScriptSourceRangesAroundTheMaster(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(rangedSvc(t, "203.0.113.1:443", "192.0.2.0/24", "10.0.0.0/8")))
	h.expect("alloc: acquire service 203.0.113.1:443/TCP backends [10.0.1.1:8080/TCP]")
	h.reply("alloc", acquired(1, 1))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=203.0.113.1:443]", "srcrange: write [1/10.0.0.0/8 1/192.0.2.0/24]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.expect() // the master waits for the ranges
	h.reply("srcrange", ok())
	h.expect("svc4: write [203.0.113.1:443/TCP#1 203.0.113.1:443/TCP#0]")
	h.reply("svc4", ok())
	h.expectAnswers("upsert: id 1 created true")

	// 192.0.2.0/24 goes, 198.51.100.0/24 comes.
	h.call(upsert(rangedSvc(t, "203.0.113.1:443", "10.0.0.0/8", "198.51.100.0/24")))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=203.0.113.1:443]", "srcrange: write [1/10.0.0.0/8 1/198.51.100.0/24]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("srcrange", ok())
	h.expect("svc4: write [203.0.113.1:443/TCP#1 203.0.113.1:443/TCP#0]")
	h.reply("svc4", ok())
	h.expect("srcrange: write [] delete [1/192.0.2.0/24]")
	h.reply("srcrange", ok())
	h.expectAnswers("upsert: id 1 created false")

	// No ranges: the master without the flag first, then the ranges go.
	// The update makes nothing new: its backend and revNAT writes go
	// beside the master.
	h.call(upsert(rangedSvc(t, "203.0.113.1:443")))
	h.expect("svc4: write [203.0.113.1:443/TCP#1 203.0.113.1:443/TCP#0]", "be4: write [1=10.0.1.1:8080]", "revnat: write [1=203.0.113.1:443]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("svc4", ok())
	h.expect("srcrange: write [] delete [1/10.0.0.0/8 1/198.51.100.0/24]")
	h.reply("srcrange", ok())
	h.expectAnswers("upsert: id 1 created false")

	h.call(upsert(rangedSvc(t, "203.0.113.1:443", "10.0.0.0/8")))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 1 created false")
	h.call(deleteFE(t, "203.0.113.1:443"))
	h.expect("svc4: write [] delete [203.0.113.1:443/TCP#0 203.0.113.1:443/TCP#1]")
	h.reply("svc4", ok())
	h.expect("be4: write [] delete [1]", "revnat: write [] delete [1]", "srcrange: write [] delete [1/10.0.0.0/8]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("srcrange", ok())
	h.expect("alloc: unhold [1]", "alloc: release services [203.0.113.1:443/TCP]")
	h.reply("alloc", ok())
	h.reply("alloc", ok())
	h.expectAnswers("delete: id 1")
}

// A failed update writes the old ranges back before the old master and
// deletes the new ones after it.
func TestScriptSourceRangesRollback(t *testing.T) {
	h := newHarness(t)
	h.call(upsert(rangedSvc(t, "203.0.113.1:443", "10.0.0.0/8")))
	h.expect("alloc: acquire service 203.0.113.1:443/TCP backends [10.0.1.1:8080/TCP]")
	h.reply("alloc", acquired(1, 1))
	h.flushAnswering(t)
	h.expectAnswers("upsert: id 1 created true")

	h.call(upsert(rangedSvc(t, "203.0.113.1:443", "172.16.0.0/12")))
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=203.0.113.1:443]", "srcrange: write [1/172.16.0.0/12]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("srcrange", ok())
	for range 1 + mapRetries {
		h.expect("svc4: write [203.0.113.1:443/TCP#1 203.0.113.1:443/TCP#0]")
		h.reply("svc4", fail(errBusy))
	}
	h.expect("be4: write [1=10.0.1.1:8080]", "revnat: write [1=203.0.113.1:443]", "srcrange: write [1/10.0.0.0/8]")
	h.reply("be4", ok())
	h.reply("revnat", ok())
	h.reply("srcrange", ok())
	h.expect("svc4: write [203.0.113.1:443/TCP#1 203.0.113.1:443/TCP#0]")
	h.reply("svc4", ok())
	h.expect("srcrange: write [] delete [1/172.16.0.0/12]")
	h.reply("srcrange", ok())
	h.flushAnswering(t)
	h.expectAnswers("upsert: error: upsert service 203.0.113.1:443/TCP: write service: device or resource busy")
}
