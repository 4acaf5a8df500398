package v1

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started by client-go's first log line.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// controller-runtime's priority queue (v0.24.1, priorityqueue.go:400):
		// handleReadyItems hands an item to a worker counted as waiting,
		// and blocks on that send for good when the worker left at the
		// queue's ShutDown; upstream's race, whichever manager runs the
		// controller (seen in CI under controller-runtime's and ours).
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleReadyItems.func1.1"),
		// Blocked for good behind it on the queue's lock, which that send holds.
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleAddBuffer"),
		// And so is handleWaitingItems when a waiting item (a RequeueAfter) came
		// due after that send stuck: seen once in CI (stop 62, ctrlruntime/fleet).
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleWaitingItems.func1"),
		// Ginkgo's interrupt handler and output interceptor live as long
		// as the process.
		goleak.IgnoreAnyFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"),
		goleak.IgnoreAnyFunction("github.com/onsi/ginkgo/v2/internal.(*genericOutputInterceptor).ResumeIntercepting.func2"),
	)
}
