# The project's commands. `make test` is what CI runs (.ci/run): the unit
# suite first, then the end-to-end suite against a real kube-apiserver.

GO ?= go

.PHONY: test unit e2e e2e-binaries demo bench

test: unit e2e

# The quick part: the library, its examples and the benchmark harness, with
# the race detector; under five minutes on two cores.
unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) -C bench vet -tags ours ./...
	$(GO) -C bench test -race -count=1 -tags ours ./...

# The end-to-end suite builds (or reuses) kube-apiserver and etcd first; see
# hack/e2e-binaries.sh.
e2e:
	cd e2e && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 40m ./...

e2e-binaries:
	hack/e2e-binaries.sh

demo:
	$(GO) run ./examples/demo

bench:
	$(GO) -C bench run -tags ours .
