package source

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// benchObjects are n ClusterIP services of 10 ready endpoints each, as the
// bench's initial-sync scenario loads them.
func benchObjects(n int) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*corev1.Service, n)
	sls := make([]*discoveryv1.EndpointSlice, n)
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		svcs[i] = service("bench", name, fmt.Sprintf("10.%d.%d.%d", 96+i/65000, (i/250)%256, 1+i%250))
		addrs := make([]string, 10)
		for j := range addrs {
			idx := (i%6400)*10 + j
			addrs[j] = fmt.Sprintf("198.18.%d.%d", idx>>8&255, idx&255)
		}
		sls[i] = slice("bench", name+"-abcde", name, addrs...)
	}
	return svcs, sls
}

// BenchmarkDesiredAtSync is the source's work between the informers' sync
// and its SyncSource call, for 10,000 services of 10 endpoints, with
// nothing translated before (cold) or everything (prepared).
func BenchmarkDesiredAtSync(b *testing.B) {
	svcs, sls := benchObjects(10000)
	for _, prepared := range []bool{false, true} {
		b.Run(fmt.Sprintf("prepared=%v", prepared), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				st := NewState("bench-node", nil)
				for i := range svcs {
					st.UpsertService(svcs[i], time.Time{})
					st.UpsertSlice(sls[i], time.Time{})
				}
				if prepared {
					st.Prepare(0)
				}
				b.StartTimer()
				if len(st.Desired()) != len(svcs) {
					b.Fatal("wrong count")
				}
			}
		})
	}
}
