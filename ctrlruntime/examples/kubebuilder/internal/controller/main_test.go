package controller

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started by client-go's first log line.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// Ginkgo's interrupt handler and output interceptor live as long
		// as the process.
		goleak.IgnoreAnyFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"),
		goleak.IgnoreAnyFunction("github.com/onsi/ginkgo/v2/internal.(*genericOutputInterceptor).ResumeIntercepting.func2"),
	)
}
