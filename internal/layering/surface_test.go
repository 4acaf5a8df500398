package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// publicPackages are the packages users import: their exported API is what
// go doc shows them.
var publicPackages = []string{".", "actors", "health", "lease", "lease/leasetest", "lease/shard", "liveview", "supervisor", "webhook"}

// allowedLeaks are the exported signatures that may name a protoactor type:
// the manager is an actor, and its PID is how a protoactor system talks to
// it (issue 35's one exception).
var allowedLeaks = map[string]bool{
	"func (*BaseManager) PID: github.com/asynkron/protoactor-go/actor.PID":       true,
	"func (*ControllerManager) PID: github.com/asynkron/protoactor-go/actor.PID": true,
	"func (*WebhookManager) PID: github.com/asynkron/protoactor-go/actor.PID":    true,
}

// TestPublicSurfaceNamesNothingInternal checks that no exported name of a
// public package has, in its signature, its fields, its methods or the type
// it aliases, a type of an internal package or of protoactor's actor
// package: what go doc -all shows users is the API they can write against.
func TestPublicSurfaceNamesNothingInternal(t *testing.T) {
	var leaks []string
	for _, pkg := range publicPackages {
		found, err := surfaceLeaks(filepath.Join(root, pkg))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range found {
			if !allowedLeaks[l] {
				leaks = append(leaks, pkg+": "+l)
			}
		}
	}
	sort.Strings(leaks)
	for _, l := range leaks {
		t.Errorf("a public signature names a type users cannot use or implement: %s", l)
	}
}

// TestSurfaceLeaksAreFound checks the check on a file of each kind of leak.
func TestSurfaceLeaksAreFound(t *testing.T) {
	dir := t.TempDir()
	src := `package p
import (
	"github.com/asynkron/protoactor-go/actor"
	sup "github.com/actorkube/controllermanager/internal/supervise"
)
type Alias = sup.Clock
type S struct{ Exported *actor.Props; hidden *actor.PID }
type I interface{ M() *actor.PID }
func F(c sup.Clock) {}
func (S) Method() map[string]*actor.Props { return nil }
func (s) unexported(sup.Clock) {}
type s struct{}
var V func() *actor.PID
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	have, err := surfaceLeaks(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"func (S) Method: github.com/asynkron/protoactor-go/actor.Props",
		"func F: github.com/actorkube/controllermanager/internal/supervise.Clock",
		"type Alias: github.com/actorkube/controllermanager/internal/supervise.Clock",
		"type I: github.com/asynkron/protoactor-go/actor.PID",
		"type S: github.com/asynkron/protoactor-go/actor.Props",
		"var V: github.com/asynkron/protoactor-go/actor.PID",
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Errorf("have\n%s\nwant\n%s", strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
}

// surfaceLeaks reads the non-test files of the package in dir and returns
// each exported declaration that names a forbidden type, as
// "<decl>: <import path>.<name>", sorted.
func surfaceLeaks(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			return nil, err
		}
		imports := map[string]string{}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			local := p[strings.LastIndex(p, "/")+1:]
			if spec.Name != nil {
				local = spec.Name.Name
			}
			imports[local] = p
		}
		report := func(decl string, n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				if p, ok := imports[x.Name]; ok && forbidden(p) {
					seen[decl+": "+p+"."+sel.Sel.Name] = true
				}
				return false
			})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				decl := "func " + d.Name.Name
				if d.Recv != nil {
					recv := types(d.Recv.List[0].Type)
					if !ast.IsExported(strings.TrimPrefix(recv, "*")) {
						continue
					}
					decl = "func (" + recv + ") " + d.Name.Name
				}
				report(decl, d.Type)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() {
							report("type "+spec.Name.Name, exportedPart(spec.Type))
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() && spec.Type != nil {
								report(strings.ToLower(d.Tok.String())+" "+n.Name, spec.Type)
							}
						}
					}
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for l := range seen {
		out = append(out, l)
	}
	sort.Strings(out)
	return out, nil
}

// forbidden reports whether a public signature may not name a type of the
// package at path: this module's internal packages and protoactor's actor
// package.
func forbidden(path string) bool {
	return strings.HasPrefix(path, module+"/internal/") || path == "github.com/asynkron/protoactor-go/actor"
}

// exportedPart is t without a struct's unexported fields and an
// interface's unexported methods, which go doc does not show.
func exportedPart(t ast.Expr) ast.Node {
	var fields *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return t
	}
	kept := &ast.FieldList{}
	for _, f := range fields.List {
		if len(f.Names) == 0 { // embedded: shown
			kept.List = append(kept.List, f)
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				kept.List = append(kept.List, f)
				break
			}
		}
	}
	return kept
}

// types is a receiver's type as written: T or *T.
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return "*" + types(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return types(e.X)
	}
	return "?"
}
