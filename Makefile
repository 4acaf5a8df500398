# The project's commands. `make test` is what CI runs (.ci/run): the unit
# suite first, then the end-to-end suite against a real kube-apiserver, then the
# controller-runtime module (its own go.mod) with its scenarios on the same binaries.

GO ?= go

.PHONY: test unit e2e e2e-binaries demo bench

test: unit e2e ctrlruntime

# The quick part: the library, its examples and the benchmark harness, with
# the race detector (the chaos test for 12s of it), then 5,000 fuzzed inputs
# for each decoder of hostile input (a count, not a duration: Go 1.26's fuzz
# coordinator can report a bare "context deadline exceeded" when -fuzztime
# ends while a starved worker is mid-input, golang/go#75804, fixed in 1.27);
# under five minutes on two cores. -parallel 4: the root package's parallel
# tests (elections on fake clientsets, 30 of them) spend most of their time
# waiting on real Lease expiries, not on the CPU; two at a time (the default,
# GOMAXPROCS) left the suite about a minute longer.
unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 -parallel 4 ./...
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime 5000x .
	$(GO) test -run '^$$' -fuzz '^FuzzAdmissionReview$$' -fuzztime 5000x ./webhook
	$(GO) -C bench vet ./...
	$(GO) -C bench test -race -count=1 ./...

# The end-to-end suite: replicas as OS processes against a real kube-apiserver
# and etcd, which hack/e2e-binaries.sh builds (cold: several minutes) or reuses
# first, so that the build does not count against the suite's timeout. -v shows
# each scenario's figures as it runs and the summary at the end. Warm: about
# two minutes on two cores.
e2e:
	cd e2e && $(GO) vet ./...
	hack/install-chromium.sh # for e2e/browser_test.go; does nothing when Chromium is there
	assets="$$(hack/e2e-binaries.sh)" && cd e2e && \
		KUBEBUILDER_ASSETS="$$assets" $(GO) test -race -count=1 -timeout 15m -v ./...

e2e-binaries:
	hack/e2e-binaries.sh

demo:
	$(GO) run ./examples/demo

# The comparative benchmarks (bench/README.md); e.g.
# make bench BENCHFLAGS='-large -json /tmp/bench.json'. A nested module cannot
# be run as `go run ./bench` from here.
bench:
	$(GO) -C bench run . $(BENCHFLAGS)

# The controller-runtime adapter, a module of its own (ctrlruntime/): vet, then
# its unit tests and its scenarios against a real kube-apiserver and etcd (the
# binaries of e2e-binaries.sh), with the race detector; -v shows the figures.
# Twice: against the oldest controller-runtime it supports (go.mod) and the
# newest (go.latest.mod).
.PHONY: ctrlruntime
ctrlruntime:
	$(GO) -C ctrlruntime vet ./...
	$(GO) -C ctrlruntime vet -modfile=go.latest.mod ./...
	assets="$$(hack/e2e-binaries.sh)" && cd ctrlruntime && \
		KUBEBUILDER_ASSETS="$$assets" $(GO) test -race -count=1 -timeout 15m -v ./... && \
		KUBEBUILDER_ASSETS="$$assets" $(GO) test -modfile=go.latest.mod -race -count=1 -timeout 15m -v ./...

# The fencing soak (docs/reliability.md, "The fencing soak"), outside CI: the
# real-API-server fencing scenarios for SOAK_ROUNDS rounds of a SIGSTOPped
# leader writing through GuardTransport, SOAK_SLOW_ROUNDS of the same with
# Lease writes slowed by 100ms, SOAK_KILL_ROUNDS of a SIGKILLed leader; every
# round checked against the committed writes: none by a non-holder. About ten
# seconds a round. `make test` skips it (TestSoak needs E2E_SOAK_ROUNDS).
SOAK_ROUNDS ?= 100
SOAK_SLOW_ROUNDS ?= 20
SOAK_KILL_ROUNDS ?= 20
.PHONY: soak
soak:
	assets="$$(hack/e2e-binaries.sh)" && cd e2e && \
		KUBEBUILDER_ASSETS="$$assets" E2E_SOAK_ROUNDS=$(SOAK_ROUNDS) \
		E2E_SOAK_SLOW_ROUNDS=$(SOAK_SLOW_ROUNDS) E2E_SOAK_KILL_ROUNDS=$(SOAK_KILL_ROUNDS) \
		$(GO) test -race -count=1 -timeout 0 -v -run '^TestSoak$$' .
