package fleet_test

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(testenv.Guard(m),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"),
	)
}
