package handlers

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citedName is a test, benchmark, example or fuzz target named in prose
// ("`TestFleetMemberWebhookAtATakenPathFailsTheMember`"). A name preceded
// by "|", or followed by "*", "|", "/" or ")", is part of a -run pattern
// or a subtest path: it is checked as a prefix of some function's name.
var citedName = regexp.MustCompile("\\b(?:Test|Benchmark|Example|Fuzz)[A-Z][A-Za-z0-9_]*")

// TestDocsCiteRealTests checks that every test, benchmark, example or fuzz
// target that the docs, README, CHANGELOG and the modules' READMEs name
// exists in some _test.go file of the repository: a figure or a claim that
// cites a test renamed or deleted fails here (issue 35: "docs that cannot
// drift"; a benchmark deleted with the old elector stayed cited for two
// releases).
func TestDocsCiteRealTests(t *testing.T) {
	root := "../.."
	var docs []string
	for _, pattern := range []string{"docs/*.md", "*.md", "ctrlruntime/*.md", "bench/*.md", "e2e/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	if len(docs) < 5 {
		t.Fatalf("found %d documents; the patterns no longer match", len(docs))
	}
	declared := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declaredFunc.FindAllStringSubmatch(string(src), -1) {
			declared[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cited := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, loc := range citedName.FindAllStringIndex(string(text), -1) {
			name := string(text[loc[0]:loc[1]])
			pattern := loc[0] > 0 && strings.ContainsRune("|", rune(text[loc[0]-1])) ||
				loc[1] < len(text) && strings.ContainsRune("*|/)", rune(text[loc[1]]))
			cited++
			if declared[name] || pattern && hasPrefix(declared, name) {
				continue
			}
			rel, _ := filepath.Rel(root, doc)
			t.Errorf("%s cites %s, which no _test.go declares", rel, name)
		}
	}
	if cited < 100 {
		t.Fatalf("found %d names cited; the pattern no longer matches", cited)
	}
}

var declaredFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)

func hasPrefix(declared map[string]bool, prefix string) bool {
	for name := range declared {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
