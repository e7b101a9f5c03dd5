package loadbalancer_test

import (
	"errors"
	"fmt"

	"github.com/actorlb/actorlb/loadbalancer"
)

func ExampleParseL3n4Addr() {
	for _, s := range []string{"10.96.0.10:53/udp", "[fd00::a]:443/tcp/internal", "10.0.1.5:8080", "10.0.1.5:0"} {
		a, err := loadbalancer.ParseL3n4Addr(s)
		if err != nil {
			fmt.Println(err, errors.Is(err, loadbalancer.ErrInvalid))
			continue
		}
		fmt.Println(a, a.IsIPv6())
	}
	// Output:
	// 10.96.0.10:53/UDP false
	// [fd00::a]:443/TCP/internal true
	// 10.0.1.5:8080/TCP false
	// invalid address "10.0.1.5:0": port must be between 1 and 65535 true
}

func ExampleService_Validate() {
	fe, _ := loadbalancer.ParseL3n4Addr("10.96.0.10:80/tcp")
	be1, _ := loadbalancer.ParseBackend("10.0.1.5:8080")
	be2, _ := loadbalancer.ParseBackend("[fd00::1]:8080")
	svc := &loadbalancer.Service{
		Frontend: loadbalancer.Frontend{L3n4Addr: fe},
		Backends: []loadbalancer.Backend{be1, be2},
	}
	err := svc.Validate()
	var ve *loadbalancer.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Field, ve.IsBackend())
	}
	fmt.Println(err)
	// Output:
	// backends[1].address true
	// invalid backends[1].address "fd00::1": IPv6 backend [fd00::1]:8080 for IPv4 frontend 10.96.0.10:80
}
