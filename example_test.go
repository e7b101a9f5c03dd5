package actorlb_test

import (
	"context"
	"fmt"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// A host agent embeds actorlb: open the pinned maps (restoring what they
// hold), declare a service, and close (the maps stay pinned). It needs root,
// so it has no Output and does not run as a test.
func Example() {
	ctx := context.Background()
	e, err := actorlb.New(ctx, actorlb.Config{BPFRoot: "/sys/fs/bpf/actorlb"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	fe, _ := lb.ParseL3n4Addr("10.96.0.10:53/udp")
	be, _ := lb.ParseBackend("10.0.1.5:53/udp")
	id, created, err := e.Upsert(ctx, &lb.Service{Frontend: lb.Frontend{L3n4Addr: fe}, Backends: []lb.Backend{be}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("service", id, "created:", created)
}
