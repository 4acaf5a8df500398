package handlers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stopLine is one stop of a walk in docs/architecture.md ("### Walking one
// restart"): "12. `internal/supervise/supervisor.go`: `(*root).boundedContext`",
// or "20. `internal/supervise/supervisor.go`: the closure `(*mailbox).after` ...".
var stopLine = regexp.MustCompile("(?m)^\\s*\\d+\\. `([^`]+\\.go)`: (?:the (?:function|closure) )?`(?:\\(\\*?(\\w+)\\)\\.)?(\\w+)`")

// TestDocsWalksNameRealFunctions checks that every stop of the walks in
// docs/architecture.md names a function or method that exists, in the file
// it names: a walk that a rename or a move left behind fails here, not in a
// reader's hands (issue 35: "docs that cannot drift").
func TestDocsWalksNameRealFunctions(t *testing.T) {
	doc, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i := strings.Index(text, "### Walking one restart")
	if i < 0 {
		t.Fatal(`docs/architecture.md has no "### Walking one restart" section`)
	}
	section := text[i:]
	if j := strings.Index(section[1:], "\n## "); j >= 0 {
		section = section[:j+1]
	}
	stops := stopLine.FindAllStringSubmatch(section, -1)
	if len(stops) < 20 {
		t.Fatalf("found %d stops in the walks; the pattern no longer matches the section's lines", len(stops))
	}
	decls := map[string]map[string]bool{} // file → "recv.name" or "name"
	for _, st := range stops {
		file, recv, name := st[1], st[2], st[3]
		have, ok := decls[file]
		if !ok {
			have = funcsOf(t, filepath.Join("../..", file))
			decls[file] = have
		}
		key := name
		if recv != "" {
			key = recv + "." + name
		}
		if !have[key] {
			t.Errorf("docs/architecture.md walks: %s names %s, which %s does not declare", strings.TrimSpace(st[0]), key, file)
		}
	}
}

// funcsOf returns the functions and methods file declares.
func funcsOf(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("docs/architecture.md walks name %s: %v", file, err)
		return map[string]bool{}
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fn.Recv == nil || len(fn.Recv.List) == 0 {
			out[fn.Name.Name] = true
			continue
		}
		typ := fn.Recv.List[0].Type
		if s, ok := typ.(*ast.StarExpr); ok {
			typ = s.X
		}
		if ix, ok := typ.(*ast.IndexExpr); ok {
			typ = ix.X
		}
		if id, ok := typ.(*ast.Ident); ok {
			out[id.Name+"."+fn.Name.Name] = true
		}
	}
	return out
}
