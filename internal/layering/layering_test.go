package layering

import (
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/actorkube/controllermanager/internal/testkit/docsection"
)

var update = flag.Bool("update", false, "rewrite the layer diagram of docs/architecture.md from Layers")

const (
	root     = "../.."
	module   = "github.com/actorkube/controllermanager"
	docsFile = root + "/docs/architecture.md"
	begin    = "<!-- BEGIN layers: generated from internal/layering.Layers by `go test ./internal/layering -update`; do not edit -->\n"
	end      = "<!-- END layers -->\n"
)

// imports are the module's packages under dir and, for each, the packages
// of this module its non-test files import, read with go/parser.
// Directories of other modules (a go.mod of their own), testdata and
// hidden or underscore directories are not this module's packages.
func imports(dir string) (map[string][]string, error) {
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != dir && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(dir, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			switch {
			case p == module:
				out[pkg] = append(out[pkg], ".")
			case strings.HasPrefix(p, module+"/"):
				out[pkg] = append(out[pkg], strings.TrimPrefix(p, module+"/"))
			}
		}
		return nil
	})
	return out, err
}

// check returns every breach of layers by graph: a package in no layer or
// in two, an import of a package drawn in its own layer or above, an
// import of a package in no layer, and a layer naming a package that does
// not exist.
func check(layers []Layer, graph map[string][]string) []string {
	level := map[string]int{}
	var problems []string
	for i, l := range layers {
		for _, p := range l.Packages {
			if j, ok := level[p]; ok {
				problems = append(problems, fmt.Sprintf("%s is drawn in layers %d and %d", p, j+1, i+1))
			}
			level[p] = i
			if _, ok := graph[p]; !ok {
				problems = append(problems, fmt.Sprintf("%s is drawn in layer %d but is no package of the module", p, i+1))
			}
		}
	}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		from, ok := level[p]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is in no layer: add it to Layers, below what imports it and above what it imports", p))
			continue
		}
		for _, q := range graph[p] {
			to, ok := level[q]
			switch {
			case !ok:
				// reported as a package in no layer
			case to == from:
				problems = append(problems, fmt.Sprintf("%s imports %s of its own layer %d (%s)", p, q, from+1, layers[from].Role))
			case to < from:
				problems = append(problems, fmt.Sprintf("%s (layer %d) imports %s, drawn above it (layer %d)", p, from+1, q, to+1))
			}
		}
	}
	return problems
}

// TestLayers checks every package of the module against Layers.
func TestLayers(t *testing.T) {
	graph, err := imports(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range check(Layers, graph) {
		t.Error(p)
	}
}

// TestCheckFindsBreaches feeds check a graph with each kind of breach, so
// that TestLayers can fail.
func TestCheckFindsBreaches(t *testing.T) {
	layers := []Layer{
		{"top", []string{".", "tool"}},
		{"middle", []string{"a", "b"}},
		{"bottom", []string{"leaf", "gone"}},
	}
	graph := map[string][]string{
		".":     {"a", "leaf"},
		"tool":  {"."},
		"a":     {"b"},
		"b":     {"."},
		"leaf":  nil,
		"stray": {"leaf"},
	}
	have := check(layers, graph)
	want := []string{
		"gone is drawn in layer 3 but is no package of the module",
		"a imports b of its own layer 2 (middle)",
		"b (layer 2) imports ., drawn above it (layer 1)",
		"stray is in no layer: add it to Layers, below what imports it and above what it imports",
		"tool imports . of its own layer 1 (top)",
	}
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Errorf("have:\n%s\nwant:\n%s", strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
}

// TestDocsDrawLayers checks that docs/architecture.md's "## Layers" draws
// Layers; -update rewrites the drawing.
func TestDocsDrawLayers(t *testing.T) {
	want := Diagram(Layers)
	docsection.Check(t, docsection.Section{File: docsFile, Begin: begin, End: end,
		Source: "Layers", Update: "go test ./internal/layering -update"}, want, *update)
}
