// Package docsection keeps a generated section of a document in step with
// the code it is rendered from: the section sits between a begin and an
// end line, a test renders it afresh and fails when the document differs,
// and with -update rewrites it instead. docs/defaults.md, the handler tables
// and the layering drawing of docs/architecture.md are kept this way.
package docsection

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

// Section is one generated section of a document.
type Section struct {
	// File is the document's path, from the test's directory.
	File string
	// Begin and End are the lines around the section, newline included.
	Begin, End string
	// Source names what the section is rendered from, for the failure.
	Source string
	// Update is the command that rewrites it, for the failure.
	Update string
}

// Check fails t when the section of s.File differs from want; with update
// it rewrites the section instead.
func Check(t testing.TB, s Section, want string, update bool) {
	t.Helper()
	doc, err := os.ReadFile(s.File)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok := bytes.Cut(doc, []byte(s.Begin))
	if !ok {
		t.Fatalf("%s: no line %q", s.File, strings.TrimSpace(s.Begin))
	}
	have, tail, ok := bytes.Cut(rest, []byte(s.End))
	if !ok {
		t.Fatalf("%s: no line %q after the begin line", s.File, strings.TrimSpace(s.End))
	}
	if string(have) == want {
		return
	}
	if update {
		// A new slice: head, rest and tail share doc's array, and appending
		// to head would write over the tail before it is copied.
		out := slices.Concat(head, []byte(s.Begin), []byte(want), []byte(s.End), tail)
		if err := os.WriteFile(s.File, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", s.File)
		return
	}
	t.Errorf("%s is out of date with %s; run %s\nhave:\n%s\nwant:\n%s", s.File, s.Source, s.Update, have, want)
}
