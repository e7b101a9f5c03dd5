package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Latency summarises the apiserver's own write→watch-event times.
type Latency struct {
	N                   int
	P50, P99, Max, Mean time.Duration
	Samples             []time.Duration // in write order
}

func (l Latency) String() string {
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s mean=%s", l.N, l.P50, l.P99, l.Max, l.Mean)
}

const probeSeqLabel = "actorlb.test/probe-seq"

// MeasureWatchLatency measures the floor of network programming latency:
// n times, it updates one EndpointSlice in namespace and times from just
// before the write to the arrival of its event on a watch opened before
// (client-go, as an informer's reflector receives it). Writes are one at a
// time. The probe slice is deleted at the end. Each event must arrive
// within 10 s.
func MeasureWatchLatency(ctx context.Context, client kubernetes.Interface, namespace string, n int) (Latency, error) {
	if n <= 0 {
		return Latency{}, fmt.Errorf("measure watch latency: n %d must be positive", n)
	}
	probes := client.DiscoveryV1().EndpointSlices(namespace)
	probe := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "watch-latency-probe-",
			Labels:       map[string]string{probeSeqLabel: "start"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.18.255.254"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To[int32](1)}},
	}
	created, err := probes.Create(ctx, probe, metav1.CreateOptions{})
	if err != nil {
		return Latency{}, fmt.Errorf("measure watch latency: create probe: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = probes.Delete(dctx, created.Name, metav1.DeleteOptions{})
	}()

	w, err := probes.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", created.Name).String(),
		ResourceVersion: created.ResourceVersion,
	})
	if err != nil {
		return Latency{}, fmt.Errorf("measure watch latency: watch: %w", err)
	}
	defer w.Stop()

	// The reader stamps each event as it arrives, so that the time is not
	// that of the write's answer when the event comes first.
	type arrival struct {
		seq int
		at  time.Time
		err error
	}
	arrivals := make(chan arrival, n+1)
	go func() {
		defer close(arrivals)
		for ev := range w.ResultChan() {
			at := time.Now()
			if ev.Type == watch.Error {
				arrivals <- arrival{err: fmt.Errorf("watch error event: %v", ev.Object)}
				return
			}
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			seq, err := strconv.Atoi(s.Labels[probeSeqLabel])
			if err != nil {
				continue
			}
			arrivals <- arrival{seq: seq, at: at}
		}
	}()

	cur := created
	samples := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		next := cur.DeepCopy()
		next.Labels[probeSeqLabel] = strconv.Itoa(i)
		start := time.Now()
		if cur, err = probes.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			return Latency{}, fmt.Errorf("measure watch latency: write %d: %w", i, err)
		}
		timeout := time.NewTimer(10 * time.Second)
	wait:
		for {
			select {
			case a, ok := <-arrivals:
				if !ok {
					timeout.Stop()
					return Latency{}, fmt.Errorf("measure watch latency: write %d: %w", i, errors.New("watch closed"))
				}
				if a.err != nil {
					timeout.Stop()
					return Latency{}, fmt.Errorf("measure watch latency: write %d: %w", i, a.err)
				}
				if a.seq == i {
					samples = append(samples, a.at.Sub(start))
					break wait
				}
			case <-timeout.C:
				return Latency{}, fmt.Errorf("measure watch latency: write %d: no event within 10s", i)
			case <-ctx.Done():
				timeout.Stop()
				return Latency{}, fmt.Errorf("measure watch latency: write %d: %w", i, ctx.Err())
			}
		}
		timeout.Stop()
	}
	return Summarize(samples), nil
}

// Summarize computes the percentiles (nearest rank) of samples.
func Summarize(samples []time.Duration) Latency {
	l := Latency{N: len(samples), Samples: samples}
	if len(samples) == 0 {
		return l
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	var sum time.Duration
	for _, s := range sorted {
		sum += s
	}
	l.P50 = Percentile(sorted, 50)
	l.P99 = Percentile(sorted, 99)
	l.Max = sorted[len(sorted)-1]
	l.Mean = sum / time.Duration(len(sorted))
	return l
}

// Percentile returns the p-th percentile (nearest rank) of sorted, which
// must be sorted ascending; 0 for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}
