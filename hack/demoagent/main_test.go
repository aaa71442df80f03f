package main

import (
	"os"
	"strings"
	"testing"
)

// TestDocsQuoteTheDemoAgent keeps docs/agents.md's Go example equal to the
// code the demo runs, so the guide cannot drift from a working agent.
func TestDocsQuoteTheDemoAgent(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/agents.md")
	if err != nil {
		t.Fatal(err)
	}
	code := between(t, string(src), "// doc:begin", "// doc:end")
	var lines []string
	for _, l := range strings.Split(code, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	quoted := between(t, string(doc), "<!-- quoted from hack/demoagent/main.go -->\n```go", "```")
	if want := strings.Join(lines, "\n"); strings.TrimSpace(quoted) != strings.TrimSpace(want) {
		t.Errorf("docs/agents.md quotes:\n%s\nhack/demoagent/main.go has:\n%s", quoted, want)
	}
}

// between returns the text after the line holding begin, up to the line
// holding end.
func between(t *testing.T, s, begin, end string) string {
	t.Helper()
	_, after, ok := strings.Cut(s, begin)
	if !ok {
		t.Fatalf("%q not found", begin)
	}
	_, after, _ = strings.Cut(after, "\n")
	i := strings.Index(after, end)
	if i < 0 {
		t.Fatalf("%q not found after %q", end, begin)
	}
	body := after[:i]
	return body[:strings.LastIndex(body, "\n")+1]
}
