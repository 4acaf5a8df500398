package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
)

// TestMain needs no goleak ignores: client-go starts no goroutine of its own for these
// tests (klog v2.140 starts its flush daemon only when asked), and the connections of
// a test's clients close when its apiserver stops.
//
// The replica program is built once, into a directory removed after the tests, and the
// figures the scenarios measured are printed at the end.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "actorkube-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	replicaBuild.dir = dir
	goleak.VerifyTestMain(suite{cluster.Guard(m), dir})
}

// suite runs the tests, then removes the program directory and prints the figures.
type suite struct {
	tests  cluster.Runner
	binDir string
}

func (s suite) Run() int {
	defer os.RemoveAll(s.binDir)
	started := time.Now()
	code := s.tests.Run()
	printFigures(os.Stdout, time.Since(started))
	return code
}
