package e2e

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
)

// TestMain needs no goleak ignores: client-go starts no goroutine of its own for these
// tests (klog v2.140 starts its flush daemon only when asked), and the connections of
// a test's clients close when its apiserver stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(cluster.Guard(m))
}
