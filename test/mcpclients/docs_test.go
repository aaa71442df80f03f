package mcpclients

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDocsRecipes checks docs/mcp.md's recipes are the files the client
// suites run, byte for byte: each recipe's block follows a comment naming
// its file.
func TestDocsRecipes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(Dir(), "..", "..", "docs", "mcp.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- recipe: (\\S+) -->\n```[a-z]*\n(.*?)```\n")
	seen := map[string]bool{}
	for _, m := range re.FindAllSubmatch(doc, -1) {
		file := string(m[1])
		seen[file] = true
		want, err := os.ReadFile(filepath.Join(Dir(), file))
		if err != nil {
			t.Errorf("docs/mcp.md names recipe %s: %v", file, err)
			continue
		}
		if string(m[2]) != string(want) {
			t.Errorf("docs/mcp.md's recipe %s differs from test/mcpclients/%s: copy the file into the page", file, file)
		}
	}
	for _, file := range []string{"recipe-typescript.mjs", "recipe-openai-agents.mjs", "recipe-langchain.mjs", "gorecipe/recipe.go"} {
		if !seen[file] {
			t.Errorf("docs/mcp.md has no recipe %s", file)
		}
	}
}
