// Package kubebuilder_test keeps the demo project's diff against plain
// controller-runtime to what docs/migrating.md promises.
package kubebuilder_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The only lines a project changes to move from controller-runtime's
// manager to ctrlruntime's (besides go.mod): in each file below, the import
// of ctrlruntime and the one line that names it.
const importLine = "\t\"github.com/actorkube/controllermanager/ctrlruntime\"\n"

var allowed = []struct {
	file      string
	plain, cr string // the changed line's text, in plain controller-runtime and here
}{
	{"cmd/main.go", "mgr, err := ctrl.NewManager(", "mgr, err := ctrlruntime.NewManager("},
	{"internal/controller/suite_test.go", "k8sManager, err := ctrl.NewManager(", "k8sManager, err := ctrlruntime.NewManager("},
	{"internal/webhook/v1/webhook_suite_test.go", "mgr, err := ctrl.NewManager(", "mgr, err := ctrlruntime.NewManager("},
	{"internal/controller/greeting_controller.go", "return ctrl.NewControllerManagedBy(mgr).", "return ctrlruntime.NewControllerManagedBy(mgr)."},
}

// The project differs from its controller-runtime twin (testdata) only by
// the allowed lines, and no other file of it mentions ctrlruntime.
func TestDiffAgainstControllerRuntimeIsOneLinePerFile(t *testing.T) {
	for _, a := range allowed {
		t.Run(a.file, func(t *testing.T) {
			have := read(t, a.file)
			want := read(t, filepath.Join("testdata", "controller-runtime", a.file+".txt"))
			if n := strings.Count(have, a.cr); n != 1 {
				t.Fatalf("%s has %d lines with %q, want 1", a.file, n, a.cr)
			}
			if n := strings.Count(have, importLine); n != 1 {
				t.Fatalf("%s imports ctrlruntime %d times, want once", a.file, n)
			}
			reverted := strings.Replace(strings.Replace(have, a.cr, a.plain, 1), importLine, "", 1)
			if reverted != want {
				t.Errorf("%s differs from its controller-runtime twin by more than the import and the line %q:\n%s", a.file, a.cr, firstDifference(reverted, want))
			}
		})
	}
	changed := map[string]bool{}
	for _, a := range allowed {
		changed[a.file] = true
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || changed[filepath.ToSlash(path)] || path == "diff_test.go" {
			return nil
		}
		if strings.Contains(read(t, path), "github.com/actorkube/controllermanager/ctrlruntime\"") {
			t.Errorf("%s imports ctrlruntime: only %v may", path, changed)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// firstDifference shows the first line where have and want differ.
func firstDifference(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  have: " + hl + "\n  want: " + wl
		}
	}
	return "(same lines)"
}
