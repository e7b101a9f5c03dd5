package actorlb

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// copyServices gives the engine services of its own: equal to the
// caller's, sharing no memory with them, each copy's slices capped at
// their length (an append to one never writes into the next), nil slices
// kept nil and a nil service an empty one; in three arrays (services,
// backends, source ranges) and the slice of pointers, whatever the
// number of services, where a copy each took two allocations a service.
func TestCopyServicesCopiesDeeplyInFourAllocations(t *testing.T) {
	svcs := []*lb.Service{
		mustService(t, "10.96.0.1:80", "10.1.0.1:8080", "10.1.0.2:8080"),
		nil,
		mustService(t, "10.96.0.2:80"), // no backend
		mustService(t, "10.96.0.3:443", "10.1.0.3:8443"),
	}
	svcs[3].SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	svcs[0].SourceRanges = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")}
	orig := make([]*lb.Service, len(svcs))
	for i, s := range svcs {
		orig[i] = s.DeepCopy()
	}

	cp := copyServices(svcs)
	require.Len(t, cp, len(svcs))
	for i, s := range svcs {
		if s == nil {
			require.Equal(t, &lb.Service{}, cp[i], "a nil service becomes an empty one (validation names it)")
			continue
		}
		require.Equal(t, s, cp[i], "service %d copied", i)
		require.NotSame(t, s, cp[i])
		require.Equal(t, s.Backends == nil, cp[i].Backends == nil, "service %d: nil backends stay nil", i)
		require.Equal(t, s.SourceRanges == nil, cp[i].SourceRanges == nil, "service %d: nil ranges stay nil", i)
		require.Equal(t, len(cp[i].Backends), cap(cp[i].Backends), "service %d: backends capped", i)
		require.Equal(t, len(cp[i].SourceRanges), cap(cp[i].SourceRanges), "service %d: ranges capped", i)
	}
	// What the engine does to its copies reaches neither the caller's
	// services nor the other copies.
	slices.Reverse(cp[0].Backends)
	cp[0].Backends[0].Port = 1
	cp[0].Backends = append(cp[0].Backends, cp[3].Backends[0])
	cp[0].SourceRanges[0] = netip.MustParsePrefix("10.0.0.0/8")
	cp[0].SourceRanges = append(cp[0].SourceRanges, netip.MustParsePrefix("10.0.0.0/16"))
	cp[3].Frontend.Port = 1
	for i := range svcs {
		require.Equal(t, orig[i], svcs[i], "the caller's service %d untouched", i)
	}
	require.Equal(t, orig[3].Backends, cp[3].Backends, "the next copy's backends untouched")
	require.Equal(t, orig[3].SourceRanges, cp[3].SourceRanges, "the next copy's ranges untouched")

	big := make([]*lb.Service, 100)
	for i := range big {
		big[i] = mustService(t, "10.96.1.1:80", "10.1.1.1:80", "10.1.1.2:80", "10.1.1.3:80")
		big[i].SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	}
	require.LessOrEqual(t, testing.AllocsPerRun(10, func() { copyServices(big) }), 4.0, "100 services in four allocations")
}

// copyServices copies what lb.Service.DeepCopy copies, field by field:
// every field of a service that refers to memory (a slice, map, pointer,
// interface, channel or function, at any depth of its structs; netip's
// addresses are values) is one it copies. A field added to lb.Service
// that refers to memory fails this until copyServices copies it too, so
// that the engine's copy never shares the caller's memory.
func TestCopyServicesCopiesEveryFieldThatRefersToMemory(t *testing.T) {
	copied := map[string]bool{"Backends": true, "SourceRanges": true}
	values := map[reflect.Type]bool{reflect.TypeFor[netip.Addr](): true, reflect.TypeFor[netip.Prefix](): true}
	root := "lb.Service"
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		if values[ty] {
			return
		}
		switch ty.Kind() {
		case reflect.Struct:
			for f := range ty.Fields() {
				p := f.Name
				if path != "" {
					p = path + "." + f.Name
				}
				walk(p, f.Type)
			}
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			require.True(t, copied[path], "%s.%s (%s) refers to memory and copyServices does not copy it", root, path, ty)
		case reflect.Array:
			walk(path+"[]", ty.Elem())
		}
	}
	walk("", reflect.TypeFor[lb.Service]())
	for _, elem := range []reflect.Type{reflect.TypeFor[lb.Backend](), reflect.TypeFor[netip.Prefix]()} {
		root, copied = elem.String(), map[string]bool{}
		walk("", elem) // the elements copied: values through and through
	}
}
