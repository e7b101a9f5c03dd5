package bpf

// The objects and their Go bindings (socklb_bpfel.go and .o,
// sockterm_bpfel.go and .o) are generated from socklb.c and sockterm.c and
// committed, so building actorlb needs no clang. Regenerate with
// `go generate ./bpf` (or `make generate`); it needs clang (Debian/Ubuntu:
// apt-get install clang llvm) and nothing else: the kernel definitions the
// programs use are in include/socklb_uapi.h, and sockterm.c declares the
// few kernel structures it reads itself (relocated by CO-RE at load time).
//
// Only little-endian objects are generated: actorlb's map layouts are
// written in little-endian host order (see package maps).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target bpfel -no-global-types socklb socklb.c -- -O2 -g -Wall -Werror -I./include

// The UDP socket termination iterator is a separate object: it needs a
// newer kernel (bpf_sock_destroy, 6.5) than the socket LB, which must load
// without it.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target bpfel -no-global-types sockterm sockterm.c -- -O2 -g -Wall -Werror -I./include
