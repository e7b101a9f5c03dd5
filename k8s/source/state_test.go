package source

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// step is one event (or several) and the change it must give, applied
// successfully before the next step.
type step struct {
	name string
	do   func(st *State)
	want []string
}

func upsertSvc(s *corev1.Service) func(*State) {
	return func(st *State) { st.UpsertService(s, time.Time{}) }
}

func deleteSvc(ns, name string) func(*State) {
	return func(st *State) { st.DeleteService(Key{ns, name}, time.Time{}) }
}

func upsertSlice(s *discoveryv1.EndpointSlice) func(*State) {
	return func(st *State) { st.UpsertSlice(s, time.Time{}) }
}

func deleteSlice(ns, name string) func(*State) {
	return func(st *State) { st.DeleteSlice(ns, name, time.Time{}) }
}

func both(fs ...func(*State)) func(*State) {
	return func(st *State) {
		for _, f := range fs {
			f(st)
		}
	}
}

func runScript(t *testing.T, st *State, steps []step) {
	t.Helper()
	for _, s := range steps {
		s.do(st)
		require.Equal(t, s.want, applyAll(t, st), "step %q", s.name)
	}
}

func TestStateScripts(t *testing.T) {
	relabelled := slice("ns", "web-1", "api", "10.0.0.1")
	relabelled.ResourceVersion = "9"
	cases := []struct {
		name      string
		nodeAddrs []string
		steps     []step
	}{{
		name: "service add, update, delete",
		steps: []step{
			{"add without slices: the frontend with no backend", upsertSvc(service("ns", "web", "10.96.0.1")),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP ->"}},
			{"slice add", upsertSlice(slice("ns", "web-1", "web", "10.0.0.1", "10.0.0.2")),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"}},
			{"port changed: old frontend deleted, new one created", upsertSvc(service("ns", "web", "10.96.0.1", func(s *corev1.Service) {
				s.Spec.Ports[0].Port = 81
			})), []string{"- 10.96.0.1:80/TCP", "+ ClusterIP 10.96.0.1:81/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"}},
			{"affinity set", upsertSvc(service("ns", "web", "10.96.0.1", func(s *corev1.Service) {
				s.Spec.Ports[0].Port = 81
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			})), []string{"+ ClusterIP 10.96.0.1:81/TCP affinity=10800 -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"}},
			{"delete", deleteSvc("ns", "web"), []string{"- 10.96.0.1:81/TCP"}},
			{"delete again: nothing", deleteSvc("ns", "web"), nil},
			{"re-created: the kept slice serves it at once", upsertSvc(service("ns", "web", "10.96.0.2")),
				[]string{"+ ClusterIP 10.96.0.2:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"}},
		},
	}, {
		name: "slice add, update, delete",
		steps: []step{
			{"service", upsertSvc(service("ns", "web", "10.96.0.1")), []string{"+ ClusterIP 10.96.0.1:80/TCP ->"}},
			{"two slices merged", both(upsertSlice(slice("ns", "web-1", "web", "10.0.0.1")), upsertSlice(slice("ns", "web-2", "web", "10.0.0.2", "10.0.0.1"))),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"}},
			{"slice update", upsertSlice(slice("ns", "web-2", "web", "10.0.0.3")),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.3:8080/TCP(active)"}},
			{"slice delete: the frontend stays", both(deleteSlice("ns", "web-1"), deleteSlice("ns", "web-2")),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP ->"}},
			{"delete of an unknown slice: nothing", deleteSlice("ns", "nope"), nil},
		},
	}, {
		name: "slice relabelled to another service moves",
		steps: []step{
			{"two services, the slice of web", both(upsertSvc(service("ns", "web", "10.96.0.1")), upsertSvc(service("ns", "api", "10.96.0.2")),
				upsertSlice(slice("ns", "web-1", "web", "10.0.0.1"))),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)", "+ ClusterIP 10.96.0.2:80/TCP ->"}},
			{"relabelled to api", upsertSlice(relabelled),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP ->", "+ ClusterIP 10.96.0.2:80/TCP -> 10.0.0.1:8080/TCP(active)"}},
			{"label removed: filed nowhere", upsertSlice(func() *discoveryv1.EndpointSlice {
				s := slice("ns", "web-1", "", "10.0.0.1")
				delete(s.Labels, discoveryv1.LabelServiceName)
				return s
			}()), []string{"+ ClusterIP 10.96.0.2:80/TCP ->"}},
			{"deleting it then changes nothing", deleteSlice("ns", "web-1"), nil},
		},
	}, {
		name: "slice before its service",
		steps: []step{
			{"slice alone: nothing", upsertSlice(slice("ns", "web-1", "web", "10.0.0.1")), nil},
			{"slice of another namespace's same name: nothing", upsertSlice(slice("other", "web-1", "web", "10.0.0.9")), nil},
			{"service arrives", upsertSvc(service("ns", "web", "10.96.0.1")),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)"}},
		},
	}, {
		name:      "node addresses change: NodePort services translated again",
		nodeAddrs: []string{"198.18.0.1"},
		steps: []step{
			{"NodePort and ClusterIP services", both(upsertSvc(service("ns", "np", "10.96.0.1", nodePort(30080))), upsertSvc(service("ns", "cip", "10.96.0.2"))),
				[]string{"+ NodePort 0.0.0.0:30080/TCP ->", "+ ClusterIP 10.96.0.1:80/TCP ->", "+ ClusterIP 10.96.0.2:80/TCP ->", "+ NodePort 198.18.0.1:30080/TCP ->"}},
			{"address replaced", func(st *State) { st.SetNodeAddresses(addrs("198.18.0.2")) },
				[]string{"- 198.18.0.1:30080/TCP", "+ NodePort 198.18.0.2:30080/TCP ->"}},
			{"same addresses in another order, repeated: nothing", func(st *State) { st.SetNodeAddresses(addrs("198.18.0.2", "198.18.0.2")) }, nil},
			{"second address", func(st *State) { st.SetNodeAddresses(addrs("198.18.0.3", "198.18.0.2")) },
				[]string{"+ NodePort 198.18.0.3:30080/TCP ->"}},
		},
	}, {
		name: "terminating fallback flows through translate",
		steps: []step{
			{"one ready, one terminating", both(upsertSvc(service("ns", "web", "10.96.0.1")),
				upsertSlice(sliceOf("ns", "web-1", "web", ep("10.0.0.1", "", "r"), ep("10.0.0.2", "", "t")))),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)"}},
			{"the ready one terminates too: both terminating", upsertSlice(sliceOf("ns", "web-1", "web", ep("10.0.0.1", "", "t"), ep("10.0.0.2", "", "t"))),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(terminating) 10.0.0.2:8080/TCP(terminating)"}},
			{"one stops serving: gone", upsertSlice(sliceOf("ns", "web-1", "web", ep("10.0.0.1", "", "n"), ep("10.0.0.2", "", "t"))),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.2:8080/TCP(terminating)"}},
			{"a new ready one: the terminating one is dropped", upsertSlice(sliceOf("ns", "web-1", "web", ep("10.0.0.3", testNode, "r"), ep("10.0.0.2", "", "t"))),
				[]string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.3:8080/TCP(active,local)"}},
		},
	}, {
		name: "skipped services give nothing",
		steps: []step{
			{"headless", upsertSvc(service("ns", "hl", "None")), nil},
			{"another proxy's", upsertSvc(service("ns", "other", "10.96.0.9", func(s *corev1.Service) {
				s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "x"}
			})), nil},
			{"a service becomes another proxy's: deleted", both(upsertSvc(service("ns", "web", "10.96.0.1"))), []string{"+ ClusterIP 10.96.0.1:80/TCP ->"}},
			{"labelled", upsertSvc(service("ns", "web", "10.96.0.1", func(s *corev1.Service) {
				s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "x"}
			})), []string{"- 10.96.0.1:80/TCP"}},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runScript(t, NewState(testNode, addrs(c.nodeAddrs...)), c.steps)
		})
	}
}

// A re-list after an outage delivers every object again, as copies, some
// with new resource versions but the same content: nothing is pending.
func TestUnchangedRelistGivesNothing(t *testing.T) {
	st := NewState(testNode, addrs("198.18.0.1"))
	svcs := []*corev1.Service{
		service("ns", "web", "10.96.0.1", rv("1")),
		service("ns", "np", "10.96.0.2", rv("2"), nodePort(30080), externalIPs("198.18.1.1")),
	}
	sls := []*discoveryv1.EndpointSlice{slice("ns", "web-1", "web", "10.0.0.1"), slice("ns", "np-1", "np", "10.0.0.2")}
	for _, s := range svcs {
		st.UpsertService(s, time.Time{})
	}
	for i, s := range sls {
		s.ResourceVersion = fmt.Sprint(10 + i)
		st.UpsertSlice(s, time.Time{})
	}
	require.Len(t, applyAll(t, st), 5)

	for i, s := range svcs {
		cp := s.DeepCopy()
		if i == 1 {
			cp.ResourceVersion = "99" // same content, new version
			cp.Annotations = map[string]string{"unrelated": "x"}
		}
		st.UpsertService(cp, time.Now())
	}
	for i, s := range sls {
		cp := s.DeepCopy()
		if i == 0 {
			cp.ResourceVersion = "98"
		}
		st.UpsertSlice(cp, time.Now())
	}
	st.SetNodeAddresses(addrs("198.18.0.1"))
	require.Empty(t, renderChange(st.Pending()))
	rep := st.Commit(Round{})
	require.Empty(t, rep.Triggers, "no change, no programming latency")
}

// Two services with the same external IP and port: the older one gets the
// frontend, the other is a conflict; updates of the loser change nothing;
// when the winner goes, the loser takes the frontend.
func TestCollisionIsResolvedByAgeThenName(t *testing.T) {
	st := NewState(testNode, nil)
	older := service("ns", "b-older", "10.96.0.1", createdAt(0), externalIPs("198.18.1.1"))
	younger := service("ns", "a-younger", "10.96.0.2", createdAt(time.Second), externalIPs("198.18.1.1"))
	st.UpsertService(younger, time.Time{})
	st.UpsertSlice(slice("ns", "y-1", "a-younger", "10.0.0.2"), time.Time{})
	st.UpsertService(older, time.Time{})
	st.UpsertSlice(slice("ns", "o-1", "b-older", "10.0.0.1"), time.Time{})
	c := st.Pending()
	require.Equal(t, []string{
		"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)",
		"+ ClusterIP 10.96.0.2:80/TCP -> 10.0.0.2:8080/TCP(active)",
		"+ ExternalIPs 198.18.1.1:80/TCP -> 10.0.0.1:8080/TCP(active)",
	}, renderChange(c))
	rep := st.Commit(ok(c))
	require.Equal(t, []Conflict{{Frontend: fe("198.18.1.1:80"), Service: "ns/a-younger", Reason: collisionReason(Key{"ns", "b-older"})}}, rep.NewConflicts)
	require.Equal(t, rep.NewConflicts, st.Conflicts())
	name, found := st.Name(fe("198.18.1.1:80"))
	require.True(t, found)
	require.Equal(t, "ns/b-older", name)

	for i := range 3 {
		st.UpsertSlice(slice("ns", "y-1", "a-younger", fmt.Sprintf("10.0.1.%d", i)), time.Time{})
		require.Equal(t, []string{fmt.Sprintf("+ ClusterIP 10.96.0.2:80/TCP -> 10.0.1.%d:8080/TCP(active)", i)}, applyAll(t, st), "the loser's own frontend only")
		require.Empty(t, st.Commit(Round{}).NewConflicts, "a conflict is reported once")
	}

	st.DeleteService(Key{"ns", "b-older"}, time.Time{})
	require.Equal(t, []string{"- 10.96.0.1:80/TCP", "+ ExternalIPs 198.18.1.1:80/TCP -> 10.0.1.2:8080/TCP(active)"}, applyAll(t, st))
	require.Empty(t, st.Conflicts())
	name, _ = st.Name(fe("198.18.1.1:80"))
	require.Equal(t, "ns/a-younger", name)
}

func TestCollisionOfTheSameAgeGoesToTheFirstName(t *testing.T) {
	for _, order := range [][]string{{"a", "b"}, {"b", "a"}} {
		st := NewState(testNode, nil)
		for i, n := range order {
			st.UpsertService(service("ns", n, fmt.Sprintf("10.96.0.%d", i+1), externalIPs("198.18.1.1")), time.Time{})
		}
		applyAll(t, st)
		name, _ := st.Name(fe("198.18.1.1:80"))
		require.Equal(t, "ns/a", name, "order %v", order)
		require.Len(t, st.Conflicts(), 1)
		require.Equal(t, "ns/b", st.Conflicts()[0].Service)
	}
}

// The same lb.Service from two services (identical translation): the
// frontend changes hands without a write.
func TestCollisionHandOverWithTheSameTranslationWritesNothing(t *testing.T) {
	st := NewState(testNode, nil)
	st.UpsertService(service("ns", "a", "10.96.0.1", externalIPs("198.18.1.1")), time.Time{})
	st.UpsertService(service("ns", "b", "10.96.0.2", externalIPs("198.18.1.1")), time.Time{})
	applyAll(t, st)
	st.DeleteService(Key{"ns", "a"}, time.Time{})
	c := st.Pending()
	require.Equal(t, []string{"- 10.96.0.1:80/TCP"}, renderChange(c))
	rep := st.Commit(ok(c))
	require.Contains(t, rep.Names, NameChange{Frontend: fe("198.18.1.1:80"), Name: "ns/b"})
	name, _ := st.Name(fe("198.18.1.1:80"))
	require.Equal(t, "ns/b", name)
}

func TestTransientFailureStaysPending(t *testing.T) {
	st := NewState(testNode, nil)
	st.UpsertService(service("ns", "web", "10.96.0.1"), t0)
	c := st.Pending()
	boom := errors.New("map write failed")
	rep := st.Commit(Round{Change: c, UpsertResults: []actorlb.UpsertResult{{Err: boom}}})
	require.Equal(t, 1, rep.Failed)
	require.ErrorIs(t, rep.FirstError, boom)
	require.Empty(t, rep.Triggers, "not programmed yet")
	require.Equal(t, renderChange(c), renderChange(st.Pending()), "the same change again")
	rep = st.Commit(ok(st.Pending()))
	require.Zero(t, rep.Failed)
	require.Equal(t, []time.Time{t0}, rep.Triggers)
	require.Equal(t, Counts{Services: 1, Frontends: 1}, st.Counts())
}

// A call that failed as a whole may or may not have written: if the
// service goes away before the retry, its frontend is deleted anyway.
func TestCallFailureMakesTheOutcomeUnknown(t *testing.T) {
	st := NewState(testNode, nil)
	st.UpsertService(service("ns", "web", "10.96.0.1"), time.Time{})
	c := st.Pending()
	rep := st.Commit(Round{Change: c, UpsertErr: errors.New("engine closed")})
	require.Equal(t, 1, rep.Failed)
	st.DeleteService(Key{"ns", "web"}, time.Time{})
	c = st.Pending()
	require.Equal(t, []string{"- 10.96.0.1:80/TCP"}, renderChange(c))
	rep = st.Commit(Round{Change: c, DeleteResults: []actorlb.DeleteResult{{Err: actorlb.ErrServiceNotFound}}})
	require.Zero(t, rep.Failed, "not found: already gone")
	require.True(t, st.Pending().Empty())
	require.Equal(t, Counts{}, st.Counts())
}

func TestOwnedFrontendIsAConflictRetriedOnChangeOrResync(t *testing.T) {
	st := NewState(testNode, nil)
	st.UpsertService(service("ns", "web", "10.96.0.1"), time.Time{})
	c := st.Pending()
	owned := fmt.Errorf("upsert: %w", actorlb.ErrFrontendOwned)
	rep := st.Commit(Round{Change: c, UpsertResults: []actorlb.UpsertResult{{Err: owned}}})
	require.Zero(t, rep.Failed, "not retried with backoff")
	require.Len(t, rep.NewConflicts, 1)
	require.Equal(t, "ns/web", rep.NewConflicts[0].Service)
	require.Contains(t, rep.NewConflicts[0].Reason, "another source owns the frontend")
	require.True(t, st.Pending().Empty(), "not retried by itself")
	_, found := st.Name(fe("10.96.0.1:80"))
	require.False(t, found, "not ours")

	st.Resync()
	c = st.Pending()
	require.Equal(t, []string{"+ ClusterIP 10.96.0.1:80/TCP ->"}, renderChange(c), "resync retries")
	rep = st.Commit(Round{Change: c, UpsertResults: []actorlb.UpsertResult{{Err: owned}}})
	require.Empty(t, rep.NewConflicts, "logged once")
	require.Len(t, st.Conflicts(), 1)

	st.UpsertSlice(slice("ns", "web-1", "web", "10.0.0.1"), time.Time{})
	c = st.Pending()
	require.Equal(t, []string{"+ ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)"}, renderChange(c), "a change retries")
	st.Commit(ok(c))
	require.Empty(t, st.Conflicts(), "resolved")
	name, _ := st.Name(fe("10.96.0.1:80"))
	require.Equal(t, "ns/web", name)
}

func TestCommitFull(t *testing.T) {
	st := NewState(testNode, nil)
	st.UpsertService(service("ns", "a", "10.96.0.1"), time.Time{})
	st.UpsertService(service("ns", "b", "10.96.0.2"), time.Time{})
	st.UpsertService(service("ns", "c", "10.96.0.3"), time.Time{})
	desired := st.Desired()
	require.Len(t, desired, 3)
	rep := st.CommitFull(desired, []actorlb.SyncFailure{
		{Frontend: fe("10.96.0.2:80"), Err: errors.New("map full")},
		{Frontend: fe("10.96.0.3:80"), Err: actorlb.ErrFrontendOwned},
	})
	require.Equal(t, 1, rep.Failed)
	require.Len(t, rep.NewConflicts, 1)
	require.Equal(t, []string{"+ ClusterIP 10.96.0.2:80/TCP ->"}, renderChange(st.Pending()), "the failed one only")
	require.Equal(t, Counts{Services: 2, Frontends: 2, Pending: 1}, st.Counts(), "a and, unknown, b")

	// b goes before its retry: its restored version is deleted.
	st.DeleteService(Key{"ns", "b"}, time.Time{})
	require.Equal(t, []string{"- 10.96.0.2:80/TCP"}, applyAll(t, st))
}

func TestTriggersAreReportedOncePerServiceWhenProgrammed(t *testing.T) {
	st := NewState(testNode, nil)
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	st.UpsertService(service("ns", "web", "10.96.0.1", externalIPs("198.18.1.1")), t2)
	st.UpsertSlice(slice("ns", "web-1", "web", "10.0.0.1"), t1)
	st.UpsertService(service("ns", "api", "10.96.0.2"), time.Time{})
	rep := st.Commit(ok(st.Pending()))
	require.Equal(t, []time.Time{t1}, rep.Triggers, "the earliest trigger of web; api had none")
	rep = st.Commit(ok(st.Pending()))
	require.Empty(t, rep.Triggers)
}

// The core is deterministic: whatever the order and grouping of events,
// whatever was translated ahead (Prepare) and whatever failed on the way, applying Pending ends with what a fresh
// state computes from the final objects, and nothing pending.
func TestIncrementalEqualsFull(t *testing.T) {
	r := testutil.Rand(t)
	for round := range 50 {
		st := NewState(testNode, addrs("198.18.0.1"))
		svcs := map[Key]*corev1.Service{}
		sls := map[objID]*discoveryv1.EndpointSlice{}
		target := map[lb.L3n4Addr]*lb.Service{}
		// apply applies what is pending to target; with faults, some
		// items fail (the target keeps what it had) or a whole call fails
		// (each of its items may or may not have been applied).
		apply := func(faults bool) {
			c := st.Pending()
			rd := ok(c)
			callFails := faults && r.IntN(4) == 0
			for i, fe := range c.Deletes {
				switch {
				case callFails:
					rd.DeleteErr = errors.New("call failed")
					if r.IntN(2) == 0 {
						delete(target, fe)
					}
				case faults && r.IntN(4) == 0:
					rd.DeleteResults[i].Err = errors.New("item failed")
				default:
					if _, ok := target[fe]; !ok {
						rd.DeleteResults[i].Err = actorlb.ErrServiceNotFound
					}
					delete(target, fe)
				}
			}
			for i, s := range c.Upserts {
				switch {
				case callFails:
					rd.UpsertErr = errors.New("call failed")
					if r.IntN(2) == 0 {
						target[s.Frontend.L3n4Addr] = s
					}
				case faults && r.IntN(4) == 0:
					rd.UpsertResults[i].Err = errors.New("item failed")
				default:
					target[s.Frontend.L3n4Addr] = s
				}
			}
			st.Commit(rd)
		}
		for range 40 {
			name := fmt.Sprintf("s%d", r.IntN(4))
			switch r.IntN(6) {
			case 0, 1:
				mods := []func(*corev1.Service){createdAt(time.Duration(r.IntN(2)) * time.Second)}
				if r.IntN(2) == 0 {
					mods = append(mods, externalIPs("198.18.1.1"))
				}
				if r.IntN(3) == 0 {
					mods = append(mods, nodePort(int32(30000+r.IntN(2))))
				}
				s := service("ns", name, fmt.Sprintf("10.96.0.%d", 1+r.IntN(3)), mods...)
				svcs[Key{"ns", name}] = s
				st.UpsertService(s, time.Time{})
			case 2:
				delete(svcs, Key{"ns", name})
				st.DeleteService(Key{"ns", name}, time.Time{})
			case 3, 4:
				sn := fmt.Sprintf("sl%d", r.IntN(5))
				s := slice("ns", sn, name, fmt.Sprintf("10.0.0.%d", 1+r.IntN(5)), fmt.Sprintf("10.0.0.%d", 1+r.IntN(5)))
				sls[objID{"ns", sn}] = s
				st.UpsertSlice(s, time.Time{})
			case 5:
				sn := fmt.Sprintf("sl%d", r.IntN(5))
				delete(sls, objID{"ns", sn})
				st.DeleteSlice("ns", sn, time.Time{})
			}
			switch r.IntN(6) {
			case 0, 1:
				apply(true)
			case 2:
				st.Prepare(r.IntN(3)) // translations kept for later
			}
		}
		apply(false)
		require.True(t, st.Pending().Empty())

		fresh := NewState(testNode, addrs("198.18.0.1"))
		for _, s := range svcs {
			fresh.UpsertService(s, time.Time{})
		}
		for _, s := range sls {
			fresh.UpsertSlice(s, time.Time{})
		}
		want := fresh.Desired()
		var got []*lb.Service
		for _, fe := range slices.SortedFunc(func(yield func(lb.L3n4Addr) bool) {
			for k := range target {
				if !yield(k) {
					return
				}
			}
		}, lb.L3n4Addr.Compare) {
			got = append(got, target[fe])
		}
		require.Equal(t, renderAll(want), renderAll(got), "round %d", round)
		require.Equal(t, fresh.Conflicts(), st.Conflicts(), "round %d", round)
	}
}

func renderAll(ss []*lb.Service) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = render(s)
	}
	return out
}
