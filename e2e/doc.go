// Package e2e holds the end-to-end tests of github.com/actorkube/controllermanager: they
// run against a real kube-apiserver and etcd, started per test by internal/cluster, and
// start replicas and helpers as separate OS processes.
//
// The scenarios (README.md lists them, with their figures) run replicas of
// internal/cmd/replica, a program that embeds the runtime as a service would and journals
// what it does (internal/journal), and check from the journals that no two replicas'
// controllers are ever active at once: across a SIGKILLed leader, a SIGTERMed one, and an
// API server frozen with SIGSTOP past the renew deadline. A validating webhook served by
// the runtime's TLS server is called by the API server itself.
//
// It is a module of its own so that what it needs to run a control plane stays out of
// the library's go.mod. Run it from this directory:
//
//	go test -race -count=1 ./...
//
// The binaries come from $KUBEBUILDER_ASSETS; when that is unset, the suite runs
// ../hack/e2e-binaries.sh itself, which builds kube-apiserver and etcd from source once
// (several minutes cold) into a cache outside the repository and reuses them after.
package e2e
