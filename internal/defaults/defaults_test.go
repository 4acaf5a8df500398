package defaults

import (
	"flag"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/internal/testkit/docsection"
)

var update = flag.Bool("update", false, "rewrite the generated list of docs/defaults.md from defaults.go")

const (
	docsFile = "../../docs/defaults.md"
	begin    = "<!-- BEGIN defaults: generated from internal/defaults/defaults.go by `go test ./internal/defaults -update`; do not edit -->\n"
	end      = "<!-- END defaults -->\n"
)

// TestDocsListEveryDefault checks that docs/defaults.md lists every
// constant of defaults.go, with its value and its comment, and nothing else:
// the list is rendered from the source, so it cannot drift from the table.
func TestDocsListEveryDefault(t *testing.T) {
	want, err := render("defaults.go")
	if err != nil {
		t.Fatal(err)
	}
	docsection.Check(t, docsection.Section{File: docsFile, Begin: begin, End: end,
		Source: "defaults.go", Update: "go test ./internal/defaults -update"}, want, *update)
}

// render is the Markdown list of the constants of file: a section per const
// block, titled by the block's comment, and a row per constant.
func render(file string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	if err != nil {
		return "", err
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("defaults", fset, []*ast.File{f}, nil)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var problems []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		title, intro, _ := strings.Cut(strings.TrimSpace(gen.Doc.Text()), "\n")
		if title == "" {
			problems = append(problems, fmt.Sprintf("%s: a const block without a comment", fset.Position(gen.Pos())))
		}
		fmt.Fprintf(&b, "\n### %s\n\n", strings.TrimSuffix(title, "."))
		if intro = oneLine(intro); intro != "" {
			fmt.Fprintf(&b, "%s\n\n", intro)
		}
		b.WriteString("| name | value | what, and why this value |\n| --- | --- | --- |\n")
		for _, spec := range gen.Specs {
			for _, name := range spec.(*ast.ValueSpec).Names {
				c := pkg.Scope().Lookup(name.Name).(*types.Const)
				text := oneLine(spec.(*ast.ValueSpec).Doc.Text())
				if !strings.HasPrefix(text, name.Name+" is ") {
					problems = append(problems, fmt.Sprintf("%s: the comment of %s must start %q", fset.Position(name.Pos()), name.Name, name.Name+" is "))
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name.Name, value(c), strings.ReplaceAll(strings.TrimPrefix(text, name.Name+" is "), "|", `\|`))
			}
		}
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return strings.TrimPrefix(b.String(), "\n"), nil
}

// value is c's value as a reader would write it: 30s, 7 MiB, "Exit".
func value(c *types.Const) string {
	v := c.Val()
	switch {
	case types.TypeString(c.Type(), nil) == "log/slog.Level":
		n, _ := constant.Int64Val(v)
		return slog.Level(n).String()
	case types.TypeString(c.Type(), nil) == "time.Duration":
		n, _ := constant.Int64Val(v)
		s := time.Duration(n).String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		return s
	case v.Kind() == constant.String:
		return "`" + v.ExactString() + "`"
	case strings.HasSuffix(c.Name(), "Bytes"):
		n, _ := constant.Int64Val(v)
		for _, unit := range []struct {
			size int64
			name string
		}{{1 << 20, "MiB"}, {1 << 10, "KiB"}} {
			if n%unit.size == 0 {
				return fmt.Sprintf("%d %s", n/unit.size, unit.name)
			}
		}
		return fmt.Sprintf("%d bytes", n)
	}
	return v.ExactString()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestRenderValues pins the rendering of each kind of value, so that a
// change of the table's types shows in review rather than as odd docs.
func TestRenderValues(t *testing.T) {
	have, err := render("defaults.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `RestartWindow` | 1m |",
		"| `InitialBackoff` | 100ms |",
		"| `ServerIdleTimeout` | 2m |",
		"| `WebhookMaxBodyBytes` | 7 MiB |",
		"| `ServerMaxHeaderBytes` | 64 KiB |",
		"| `EventBuffer` | 10000 |",
		"| `OnLeaseLost` | `\"Exit\"` |",
		"| `ProbeTimeout` | 1s |",
		"| `LogLevel` | WARN |",
		"| `MaxCampaigns` | 16 |",
		"| `FleetProbePeriod` | 10s |",
		"| `FleetProbeTimeout` | 5s |",
		"| `FleetFailureThreshold` | 30s |",
		"| `FleetSuccessThreshold` | 30s |",
	} {
		if !strings.Contains(have, want) {
			t.Errorf("the rendered list has no %q", want)
		}
	}
}
