package packetlb

// The object and its Go bindings (packetlb_bpfel.go and .o) are generated
// from packetlb.c and committed, so building actorlb needs no clang.
// Regenerate with `go generate ./bpf/...` (or `make generate`).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package packetlb -target bpfel -no-global-types packetlb packetlb.c -- -O2 -g -Wall -Werror -I. -I../include
