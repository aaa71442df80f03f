package controller

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestArchitectureNamesExist: every file and Go name docs/architecture.md
// walks a call through exists, so the walk cannot drift from the code. A
// name is a backticked file ending in .go, a camelCase identifier
// (admitSelf), or Type.Member / package.Name (pipeline.PlanTurn); single
// words and field paths are prose.
func TestArchitectureNamesExist(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	var sources strings.Builder
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go"):
			return nil
		}
		files[d.Name()] = true
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = true
		b, err := os.ReadFile(path) // tests too: they are cited by name
		if err != nil {
			return err
		}
		sources.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := sources.String()
	// A Go declaration of name, or an API field of that JSON name.
	declared := func(name string) bool {
		return strings.Contains(src, `json:"`+name+`,`) || strings.Contains(src, `json:"`+name+`"`) ||
			regexp.MustCompile(`(?m)(func (\([^)]*\) )?|type |const |var |^\s+)`+regexp.QuoteMeta(name)+`\b`).MatchString(src)
	}
	packages := map[string]bool{"pipeline": true, "sandbox": true, "approval": true, "agent": true, "exec": true, "runner": true, "providers": true, "lifecycle": true, "profile": true, "toolcalls": true}
	camel := regexp.MustCompile(`^[a-z]+[A-Z][A-Za-z]*$|^[A-Z][a-z]+[A-Z][A-Za-z]*$`)
	dotted := regexp.MustCompile(`^([A-Za-z]+)\.([A-Z][A-Za-z]*|[a-z]+[A-Z][A-Za-z]*|[a-z]+)$`)
	prose := map[string]bool{"md": true, "yaml": true, "txt": true}
	checked := 0
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(string(doc), -1) {
		name := m[1]
		switch {
		case strings.HasSuffix(name, ".go") && !strings.Contains(name, " "):
			checked++
			if !files[name] && !files[strings.TrimPrefix(name, "./")] {
				t.Errorf("docs/architecture.md cites %s, which does not exist", name)
			}
		case camel.MatchString(name):
			checked++
			if !declared(name) {
				t.Errorf("docs/architecture.md cites %s, which no Go file declares", name)
			}
		case dotted.MatchString(name):
			parts := dotted.FindStringSubmatch(name)
			if prose[parts[2]] || !packages[parts[1]] && (parts[1][0] < 'A' || parts[1][0] > 'Z') {
				continue // a field path, such as schedule.commitSequence
			}
			checked++
			if !declared(parts[2]) {
				t.Errorf("docs/architecture.md cites %s, and no Go file declares %s", name, parts[2])
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d names checked: the walk through the code is gone, or this test no longer finds it", checked)
	}
}
