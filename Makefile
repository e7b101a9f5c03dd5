# actorlb — see README.md. Two commands matter: `make run` and `make test`.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin/actorlb
BPF_ROOT ?= /sys/fs/bpf/actorlb
# Test flags: -race everywhere; CI sets ACTORLB_REQUIRE_PRIVILEGED=1.
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build run test test-deps kube-tools bench bench-table bench-smoke chaos lint generate docs install clean

all: build

# -buildvcs=auto: stamp the VCS revision (actorlb version) when built from
# a git checkout, whatever GOFLAGS says.
build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/actorlb

# Starts the agent in the foreground with the embedded defaults.
run: build
	./$(BIN) agent --bpf-root $(BPF_ROOT)

test: lint test-deps kube-tools
	$(GO) test $(TEST_FLAGS) ./...
	$(MAKE) --no-print-directory bench-smoke

# The Go micro-benchmarks of `make bench`, three iterations each (some
# seconds): one that fails or hangs fails `make test` (one did hang,
# unnoticed until `make bench`: it stepped a call the engine takes only
# once; go test's -timeout did not end that hang: the binary sat idle past
# it), so timeout(1) bounds the run. Figures from it mean nothing; `make
# bench` measures.
MICRO_BENCH_PKGS := ./api ./maps ./internal/... ./tests/datapath
bench-smoke:
	@timeout -k 10s 5m $(GO) test -count=1 -run '^$$' -bench . -benchtime 3x $(MICRO_BENCH_PKGS) || \
	  { echo "bench-smoke: a micro-benchmark failed, or hung (no end in 5 minutes)" >&2; exit 1; }

# What the tests need on a fresh machine, as root: bpftool (the BTF test
# reads our maps with it), iproute2 (network namespaces) and bpffs at
# /sys/fs/bpf. Without root nothing is installed: the privileged tests
# skip (or fail under ACTORLB_REQUIRE_PRIVILEGED=1).
test-deps:
	@if [ "$$(id -u)" = 0 ]; then \
	  need=""; \
	  command -v bpftool >/dev/null || need="$$need bpftool"; \
	  command -v ip >/dev/null || need="$$need iproute2"; \
	  if [ -n "$$need" ]; then \
	    echo "installing:$$need"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null; \
	  fi; \
	  mkdir -p /sys/fs/bpf; \
	  mount | grep -q ' /sys/fs/bpf type bpf' || mount -t bpf bpf /sys/fs/bpf; \
	fi

# The real Kubernetes control plane of the Kubernetes-mode tests: etcd and
# kube-apiserver built from the Go module proxy, each in a tools module of
# its own under tests/kube/tools (not part of ./...), into bin/kube/. Rebuilt
# only when missing or older than their sources, go.mod/go.sum or the Go
# toolchain. Never with -race or the caller's GOFLAGS: they are tools, not
# code under test. Cold: minutes (k8s.io/kubernetes); warm: nothing to do.
KUBE_BIN := bin/kube
KUBE_TOOLS := tests/kube/tools
KUBE_GOFLAGS := -buildvcs=false
KUBE_GOVERSION := $(wildcard $(shell $(GO) env GOROOT 2>/dev/null)/VERSION)
kube_tool_srcs = $(wildcard $(KUBE_TOOLS)/$(1)/*.go) $(KUBE_TOOLS)/$(1)/go.mod $(KUBE_TOOLS)/$(1)/go.sum $(KUBE_GOVERSION)

kube-tools: $(KUBE_BIN)/kube-apiserver $(KUBE_BIN)/etcd

$(KUBE_BIN)/kube-apiserver: $(call kube_tool_srcs,apiserver)
	@mkdir -p $(KUBE_BIN)
	cd $(KUBE_TOOLS)/apiserver && GOFLAGS=$(KUBE_GOFLAGS) $(GO) build -ldflags='-s -w' -o $(CURDIR)/$@.tmp .
	mv $@.tmp $@

$(KUBE_BIN)/etcd: $(call kube_tool_srcs,etcd)
	@mkdir -p $(KUBE_BIN)
	cd $(KUBE_TOOLS)/etcd && GOFLAGS=$(KUBE_GOFLAGS) $(GO) build -ldflags='-s -w' -o $(CURDIR)/$@.tmp .
	mv $@.tmp $@

# Benchmarks (as root, real maps): Go micro-benchmarks, the socket-LB
# connect rate, then the harness, which writes bench-results.json: the
# engine's scenarios, then the Kubernetes-mode ones against the real etcd
# and kube-apiserver of kube-tools (about 5 minutes; skipped with a message
# when the binaries are missing). BENCH_FLAGS go to the harness, e.g.
# BENCH_FLAGS=--kube=false, --kube-only, --packet-only or --maglev-only
# (go run ./tests/bench --help).
BENCH_FLAGS ?=
bench: build kube-tools
	$(GO) test -run '^$$' -bench . -benchmem $(MICRO_BENCH_PKGS)
	$(GO) run ./tests/bench --out bench-results.json $(BENCH_FLAGS)

# The README's tables (figures with their CPU, issue 18's targets) from
# the last run's bench-results.json; BENCH_RUNS=a.json,b.json adds the
# range over more runs.
BENCH_RUNS ?= bench-results.json
bench-table:
	$(GO) run ./tests/bench --markdown-from $(BENCH_RUNS)

# A long chaos soak (the seed is printed; TEST_SEED=... replays it).
CHAOS_OPS ?= 100000
chaos:
	CHAOS_OPS=$(CHAOS_OPS) $(GO) test -race -count=1 -timeout 60m -run TestChaos -v ./tests/chaos 2>&1 | grep -v 'level=' | tail -20

lint:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Regenerates the BPF objects (needs clang; installs it if missing).
generate:
	@command -v clang >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang llvm libbpf-dev)
	$(GO) generate ./...

# The markdown reference of every command (cobra/doc), with the built-in
# defaults (not this shell's ACTORLB_* variables).
docs:
	rm -rf docs/cli
	env -u ACTORLB_HOST -u ACTORLB_BPF_ROOT $(GO) run ./cmd/actorlb gen-docs docs/cli

# Installs the binary, the systemd unit and the bash completion (as root;
# PREFIX and DESTDIR as usual). Then: systemctl daemon-reload &&
# systemctl enable --now actorlb.
PREFIX ?= /usr/local
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/actorlb
	install -D -m 0644 contrib/systemd/actorlb.service $(DESTDIR)/etc/systemd/system/actorlb.service
	sed -i 's|/usr/local/bin/actorlb|$(PREFIX)/bin/actorlb|' $(DESTDIR)/etc/systemd/system/actorlb.service
	install -d $(DESTDIR)/etc/bash_completion.d
	./$(BIN) completion bash > $(DESTDIR)/etc/bash_completion.d/actorlb
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/actorlb/README.md

clean:
	rm -rf bin
