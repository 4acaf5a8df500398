package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the root package's surface_gen.go")

// root is the root package's directory, from this one.
const root = "../.."

// TestSurfaceGenIsCurrent renders surface_gen.go from the root package's
// source and compares it with the file: a method of BaseManager added,
// removed, renamed or re-documented without go generate fails here.
func TestSurfaceGenIsCurrent(t *testing.T) {
	want, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, generated)
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(have) == string(want) {
		return
	}
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", path)
		return
	}
	t.Errorf("%s is stale: run go generate in the root directory (or go test ./internal/surfacegen -update)\n%s",
		generated, firstDifference(string(have), string(want)))
}

// TestEveryBaseMethodOnBothManagers checks the root package as compiled,
// surface_gen.go included: each manager declares every exported method of
// *BaseManager, its own or a forwarder, so that go doc lists them all.
func TestEveryBaseMethodOnBothManagers(t *testing.T) {
	names, err := filepath.Glob(filepath.Join(root, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	declared := map[string][]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.IsExported() {
				declared[receiver(fn)] = append(declared[receiver(fn)], fn.Name.Name)
			}
		}
	}
	if len(declared[base]) == 0 {
		t.Fatalf("no exported method of *%s in %s", base, root)
	}
	for _, mgr := range managers {
		for _, name := range declared[base] {
			if !slices.Contains(declared[mgr], name) {
				t.Errorf("%s does not declare %s.%s: go doc %s lists no %s", mgr, base, name, mgr, name)
			}
		}
	}
}

// TestRenderForwards checks the forwarders of a package of two methods:
// a manager's own method is left alone, the other is forwarded with the
// first sentence of its doc, its parameters, a variadic one passed on, and
// its named results.
func TestRenderForwards(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import "context"

type BaseManager struct{}
type ControllerManager struct{ *BaseManager }
type WebhookManager struct{ *BaseManager }

// Wait waits for ctx. It is long; this is not copied.
func (m *BaseManager) Wait(ctx context.Context, names ...string) (ok bool, err error) { return }

// Start starts.
func (m *BaseManager) Start(int) {}

// Start starts differently.
func (m *ControllerManager) Start() {}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	have := string(out)
	for _, want := range []string{
		"// Wait waits for ctx. See BaseManager.Wait.\nfunc (m *ControllerManager) Wait(ctx context.Context, names ...string) (ok bool, err error) {\n\treturn m.BaseManager.Wait(ctx, names...)\n}",
		"// Start starts. See BaseManager.Start.\nfunc (m *WebhookManager) Start(arg0 int) { m.BaseManager.Start(arg0) }",
		"import (\n\t\"context\"\n)",
	} {
		if !strings.Contains(have, want) {
			t.Errorf("want\n%s\nin\n%s", want, have)
		}
	}
	if strings.Contains(have, "func (m *ControllerManager) Start(") {
		t.Errorf("ControllerManager's own Start was forwarded:\n%s", have)
	}
	if strings.Contains(have, "this is not copied") {
		t.Errorf("more than the first sentence was copied:\n%s", have)
	}
}

// firstDifference shows the first line where have and want part.
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
			return "line " + strconv.Itoa(i+1) + ":\nhave: " + hl + "\nwant: " + wl
		}
	}
	return ""
}
