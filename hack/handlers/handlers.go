// Package handlers renders the "Message → handler → file" tables of
// docs/architecture.md from the code: for each actor's Receive, every case
// of the type switch on its message, the functions the case calls, and the
// file each of them is defined in. It reads the source (go/parser, no type
// checking), so it finds a handler wherever it is, under whatever name:
// only the packages that hold actors are listed here, never a handler.
//
// `go test ./hack/handlers` fails when the tables in the doc have drifted
// from the code; `go test ./hack/handlers -update` rewrites them.
package handlers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Packages are the directories, relative to the module's root, whose types
// with a Receive(actor.Context) method are actors: the root supervisor, the
// child actor, and the two electors.
var Packages = []string{"internal/supervise", "internal/childactor", "internal/elector"}

// pkg is one parsed package: its files and every function and method in
// them, by name.
type pkg struct {
	dir   string
	fset  *token.FileSet
	files map[string]*ast.File     // by path relative to the module's root
	funcs map[string]*ast.FuncDecl // "Name" or "Recv.Name"
	where map[*ast.FuncDecl]string // the file each is defined in
	// fields is the type of each field of the package's structs whose type
	// the package declares: "Struct.field" → "Type" (a pointer's element).
	fields map[string]string
}

// Render returns the Markdown tables of the actors in Packages, read from
// the module rooted at root.
func Render(root string) (string, error) { return render(root, Packages) }

func render(root string, dirs []string) (string, error) {
	var b strings.Builder
	b.WriteString("For each actor, every case of the type switch of its `Receive`, the methods of the actor and\n" +
		"the functions of its package that the case calls, with the methods it calls through a field (of\n" +
		"the actor or of the message) whose type the package declares, named with that type (calls\n" +
		"through a variable or another package are left out), and the file each is defined in.\n")
	for _, dir := range dirs {
		p, err := parse(root, dir)
		if err != nil {
			return "", err
		}
		actors := p.receivers()
		if len(actors) == 0 {
			return "", fmt.Errorf("%s: no method Receive(actor.Context) with a type switch on the message", dir)
		}
		for _, recv := range actors {
			p.render(&b, recv)
		}
	}
	return b.String(), nil
}

func parse(root, dir string) (*pkg, error) {
	p := &pkg{dir: dir, fset: token.NewFileSet(), files: map[string]*ast.File{}, funcs: map[string]*ast.FuncDecl{}, where: map[*ast.FuncDecl]string{},
		fields: map[string]string{}}
	names, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(p.fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		rel := filepath.ToSlash(filepath.Join(dir, filepath.Base(name)))
		p.files[rel] = f
		for _, d := range f.Decls {
			p.addFields(d)
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			key := fd.Name.Name
			if r := recvType(fd); r != "" {
				key = r + "." + key
			}
			p.funcs[key], p.where[fd] = fd, rel
		}
	}
	return p, nil
}

// addFields records the fields of d's struct types whose type is one of
// the package's (T or *T).
func (p *pkg) addFields(d ast.Decl) {
	gd, ok := d.(*ast.GenDecl)
	if !ok || gd.Tok != token.TYPE {
		return
	}
	for _, spec := range gd.Specs {
		ts := spec.(*ast.TypeSpec)
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, f := range st.Fields.List {
			t := f.Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			id, ok := t.(*ast.Ident)
			if !ok {
				continue
			}
			for _, n := range f.Names {
				p.fields[ts.Name.Name+"."+n.Name] = id.Name
			}
		}
	}
}

// recvType is the name of fd's receiver type, "" for a function.
func recvType(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// receivers are the types of p with a Receive(actor.Context) method whose
// body (or a method it calls) switches on the message's type, sorted.
func (p *pkg) receivers() []string {
	var out []string
	for key, fd := range p.funcs {
		recv, name, ok := strings.Cut(key, ".")
		if !ok || name != "Receive" || fd.Type.Params.NumFields() != 1 || fd.Body == nil {
			continue
		}
		if sel, ok := fd.Type.Params.List[0].Type.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Context" {
			continue
		}
		if sw, _ := p.typeSwitch(recv, fd, 0); sw != nil {
			out = append(out, recv)
		}
	}
	sort.Strings(out)
	return out
}

// typeSwitch finds the type switch of fd, or of a method of recv that fd
// calls (a Receive that delegates to a dispatch method), up to three calls
// deep; it returns the switch and the method it is in.
func (p *pkg) typeSwitch(recv string, fd *ast.FuncDecl, depth int) (*ast.TypeSwitchStmt, *ast.FuncDecl) {
	var sw *ast.TypeSwitchStmt
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if s, ok := n.(*ast.TypeSwitchStmt); ok && sw == nil {
			sw = s
		}
		return sw == nil
	})
	if sw != nil || depth == 3 {
		return sw, fd
	}
	for _, callee := range p.calls(recv, fd.Body, recvName(fd), scope{}) {
		if s, in := p.typeSwitch(recv, callee, depth+1); s != nil {
			return s, in
		}
	}
	return nil, nil
}

func recvName(fd *ast.FuncDecl) string {
	if fd.Recv != nil && len(fd.Recv.List) > 0 && len(fd.Recv.List[0].Names) > 0 {
		return fd.Recv.List[0].Names[0].Name
	}
	return ""
}

// scope is a case of the type switch: the variable it binds (m in
// "switch m := msg.(type)") and, when the case names one of the package's
// types alone, that type.
type scope struct{ bound, typ string }

// calls are the methods of recv (called on self, the receiver's name), the
// functions of the package, and the methods called through a field of the
// receiver or of the case's message whose type the package declares
// (s.shutdown.onOverdue(), m.attempt.expired(...)), that n calls, in the
// order they appear, each once. Calls through a variable or another
// package are not this actor's handlers and are left out.
func (p *pkg) calls(recv string, n ast.Node, self string, sc scope) []*ast.FuncDecl {
	var out []*ast.FuncDecl
	seen := map[*ast.FuncDecl]bool{}
	ast.Inspect(n, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var fd *ast.FuncDecl
		switch fun := call.Fun.(type) {
		case *ast.SelectorExpr:
			if id, ok := fun.X.(*ast.Ident); ok && self != "" && id.Name == self {
				fd = p.funcs[recv+"."+fun.Sel.Name]
			}
			if field, ok := fun.X.(*ast.SelectorExpr); ok {
				if id, ok := field.X.(*ast.Ident); ok {
					base := ""
					switch {
					case self != "" && id.Name == self:
						base = recv
					case sc.bound != "" && id.Name == sc.bound:
						base = sc.typ
					}
					if t := p.fields[base+"."+field.Sel.Name]; base != "" && t != "" {
						fd = p.funcs[t+"."+fun.Sel.Name]
					}
				}
			}
		case *ast.Ident:
			fd = p.funcs[fun.Name]
		}
		if fd != nil && !seen[fd] {
			seen[fd] = true
			out = append(out, fd)
		}
		return true
	})
	return out
}

// render writes the table of the actor recv.
func (p *pkg) render(b *strings.Builder, recv string) {
	receive := p.funcs[recv+".Receive"]
	sw, in := p.typeSwitch(recv, receive, 0)
	self := recvName(in)
	name := filepath.Base(p.dir) + "." + recv
	fmt.Fprintf(b, "\n`%s`, its `Receive` in `%s`:\n\n", name, p.where[receive])
	b.WriteString("| message | handler | file |\n| --- | --- | --- |\n")
	for _, stmt := range sw.Body.List {
		cc := stmt.(*ast.CaseClause)
		var types []string
		for _, e := range cc.List {
			types = append(types, "`"+p.expr(e)+"`")
		}
		if cc.List == nil {
			types = []string{"(any other)"}
		}
		var handlers, files []string
		sc := scope{}
		if as, ok := sw.Assign.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(cc.List) == 1 {
			if id, ok := as.Lhs[0].(*ast.Ident); ok {
				sc.bound = id.Name
			}
			t := cc.List[0]
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			if id, ok := t.(*ast.Ident); ok {
				sc.typ = id.Name
			}
		}
		for _, fd := range p.calls(recv, &ast.BlockStmt{List: cc.Body}, self, sc) {
			name := fd.Name.Name
			if r := recvType(fd); r != "" && r != recv {
				name = r + "." + name // a method of an operation, not of the actor
			}
			handlers = append(handlers, "`"+name+"`")
			if f := "`" + p.where[fd] + "`"; !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
		if len(handlers) == 0 {
			if len(cc.Body) == 0 {
				handlers = []string{"(ignored)"}
			} else {
				handlers = []string{"(in `" + in.Name.Name + "`)"}
				files = []string{"`" + p.where[in] + "`"}
			}
		}
		if len(files) == 0 {
			files = []string{"—"}
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", strings.Join(types, ", "), strings.Join(handlers, ", "), strings.Join(files, ", "))
	}
}

// expr is a case's type as written: StartManager, actors.Started, *actor.Started.
func (p *pkg) expr(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + p.expr(e.X)
	case *ast.SelectorExpr:
		return p.expr(e.X) + "." + e.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}
