package controllermanager_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sentinelPackages are the packages whose sentinels a user of the root
// package matches with errors.Is on what the root returns: each exported
// Err* variable of theirs must have an alias in the root.
var sentinelPackages = map[string]string{
	"supervisor":  "github.com/actorkube/controllermanager/supervisor",
	"actors":      "github.com/actorkube/controllermanager/actors",
	"lease":       "github.com/actorkube/controllermanager/lease",
	"lease/shard": "github.com/actorkube/controllermanager/lease/shard",
	"webhook":     "github.com/actorkube/controllermanager/webhook",
	"health":      "github.com/actorkube/controllermanager/health",
	// leasetest is public API for users' tests; see sentinelExclusions.
	"lease/leasetest": "github.com/actorkube/controllermanager/lease/leasetest",
}

// sentinelExclusions are the sentinels the root need not alias, each with
// why no caller of the root matches it.
var sentinelExclusions = map[string]string{
	// The in-memory Lease server's error for a partitioned client: a test
	// that cuts a client off (Client.Partition) imports leasetest already,
	// and matches it there.
	"github.com/actorkube/controllermanager/lease/leasetest.ErrPartitioned": "a test kit's own error",
}

// TestEverySentinelReachableFromRoot walks the exported Err* variables of
// sentinelPackages (go/ast, non-test files) and fails for each one that no
// variable of the root package is (var ErrX = pkg.ErrY), unless it is in
// sentinelExclusions.
func TestEverySentinelReachableFromRoot(t *testing.T) {
	aliased := rootAliases(t)
	for dir, path := range sentinelPackages {
		for _, name := range sentinels(t, dir) {
			key := path + "." + name
			if _, ok := sentinelExclusions[key]; ok {
				continue
			}
			if !aliased[key] {
				t.Errorf("%s.%s has no alias in the root package: add var Err... = %s.%s, with a doc comment, to errors.go",
					filepath.Base(path), name, filepath.Base(path), name)
			}
		}
	}
	for key := range sentinelExclusions {
		if aliased[key] {
			t.Errorf("%s is excluded but has an alias: drop it from sentinelExclusions", key)
		}
	}
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("%s: no Go files", dir)
	}
	return files
}

// sentinels are the exported package-level variables of dir named Err*.
func sentinels(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			gen, ok := d.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if id.IsExported() && strings.HasPrefix(id.Name, "Err") {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	return names
}

// rootAliases are the "<import path>.<name>" that a package-level variable
// of the root package is set to.
func rootAliases(t *testing.T) map[string]bool {
	t.Helper()
	aliased := map[string]bool{}
	for _, f := range parseDir(t, ".") {
		imports := map[string]string{}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			imports[local] = path
		}
		for _, d := range f.Decls {
			gen, ok := d.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				for _, v := range spec.(*ast.ValueSpec).Values {
					sel, ok := v.(*ast.SelectorExpr)
					if !ok {
						continue
					}
					if pkg, ok := sel.X.(*ast.Ident); ok && imports[pkg.Name] != "" {
						aliased[imports[pkg.Name]+"."+sel.Sel.Name] = true
					}
				}
			}
		}
	}
	return aliased
}
