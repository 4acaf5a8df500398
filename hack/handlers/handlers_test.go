package handlers

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
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
	doc, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok := bytes.Cut(doc, []byte(begin))
	if !ok {
		t.Fatalf("%s: no line %q", docsFile, strings.TrimSpace(begin))
	}
	have, tail, ok := bytes.Cut(rest, []byte(end))
	if !ok {
		t.Fatalf("%s: no line %q after the begin line", docsFile, strings.TrimSpace(end))
	}
	if string(have) == want {
		return
	}
	if *update {
		out := append(append(append(append(head, begin...), want...), end...), tail...)
		if err := os.WriteFile(docsFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", docsFile)
		return
	}
	t.Errorf("%s is out of date with the actors' code; run go test ./hack/handlers -update\nhave:\n%s\nwant:\n%s", docsFile, have, want)
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
