// Package cluster runs a real control plane for the end-to-end tests: an etcd and a
// kube-apiserver as OS processes on loopback, each test (or test binary) with its own.
//
// A test gets one with Start, which registers its stop with t.Cleanup:
//
//	c := cluster.Start(t, cluster.Options{})
//	client := c.Clientset()       // kubernetes.Interface, authenticated as a system:masters user
//	path := c.Kubeconfig()        // the same credentials for a helper process
//
// Every process the package starts, the control plane's and the helper programs started
// with StartProgram alike, is stopped whatever ends the test binary:
//   - a passing or failing test, and a panicking one: Start and StartProgram stop in t.Cleanup;
//   - SIGINT or SIGTERM to the test binary: Guard's handler stops them all, removes their
//     directories, then lets the signal end the binary;
//   - anything that kills the binary outright (go test's -timeout panic, SIGKILL): each
//     child gets SIGKILL from the kernel, since it was started with a parent-death signal
//     (only their directories, $TMPDIR/actorkube-e2e-<pid>-*, are left behind then; the
//     next Guard removes those whose test binary no longer runs).
//
// Binaries come from Options.BinDir, else from $KUBEBUILDER_ASSETS (the convention of
// controller-runtime's envtest, so the same directory serves both), else from
// hack/e2e-binaries.sh, which builds them from source once and prints their directory.
// A missing binary is a failure, never a skip.
//
// Why not controller-runtime's envtest: it resolves together with client-go v0.37.2 and
// would work for the tests themselves, but it starts its processes in their own process
// group without a parent-death signal and offers no way to set one, so a test binary
// killed by go test's timeout leaves a kube-apiserver and an etcd running; it also waits
// on /healthz rather than /readyz. This package is about as small as the code needed to
// configure envtest for these tests, and it keeps controller-runtime, whose manager this
// project replaces, out of the e2e module's dependency graph.
package cluster
