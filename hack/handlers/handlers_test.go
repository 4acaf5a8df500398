package handlers

import (
	"flag"
	"strings"
	"testing"

	"github.com/actorkube/controllermanager/internal/testkit/docsection"
)

var update = flag.Bool("update", false, "rewrite the generated tables of docs/architecture.md from the actors' code")

const (
	docsFile = "../../docs/architecture.md"
	begin    = "<!-- BEGIN handlers: generated from each actor's Receive by `go test ./hack/handlers -update`; do not edit -->\n"
	end      = "<!-- END handlers -->\n"
)

// TestDocsTableEveryHandler checks that docs/architecture.md's
// "Message → handler → file" tables are those the code gives today.
func TestDocsTableEveryHandler(t *testing.T) {
	want, err := Render("../..")
	if err != nil {
		t.Fatal(err)
	}
	docsection.Check(t, docsection.Section{File: docsFile, Begin: begin, End: end,
		Source: "the actors' code", Update: "go test ./hack/handlers -update"}, want, *update)
}

// TestFindsHandlersByReading renders a package whose Receive delegates to a
// dispatch method and whose handlers live in another file under names of
// no convention: the table follows the code, not a list.
func TestFindsHandlersByReading(t *testing.T) {
	have, err := render("testdata", []string{"moved"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"`moved.renamedActor`, its `Receive` in `moved/actor.go`",
		"| `ping` | `handlePing` | `moved/handlers.go` |",
		"| `pong`, `*actor.Started` | `onPong` | `moved/handlers.go` |",
		"| `*actor.Stopping` | (ignored) | — |",
	} {
		if !strings.Contains(have, want) {
			t.Errorf("the table has no %q:\n%s", want, have)
		}
	}
	if _, err := render("testdata", []string{"moved", "nothing"}); err == nil {
		t.Error("a package without an actor rendered without an error")
	}
}
