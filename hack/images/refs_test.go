package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// refFiles are the repository's files that name toolgate's images
// (doublestar: any depth).
var refFiles = []string{
	"config/**/*.yaml",
	"hack/*.yaml",
	"hack/*.sh",
	"charts/toolgate/values.yaml",
	"test/e2e/*.go",
	"test/e2e/testdata/*.yaml",
	"hack/bench/*.go",
	"hack/chaos/*.go",
	"internal/testutil/*.go",
	"internal/providers/sandbox/pod/*_test.go",
	"docs/*.md",
	"README.md",
	"Makefile",
}

var (
	imageRefRE = regexp.MustCompile(`toolgate\.dev/([a-z0-9][a-z0-9._-]*):([A-Za-z0-9_][A-Za-z0-9_.-]*)`)
	repoRE     = regexp.MustCompile(`repository:\s*["']?(toolgate\.dev/[a-z0-9][a-z0-9._-]*)`)
)

// scanRefs returns, for the files under root matching patterns, every
// image reference (toolgate.dev/NAME:TAG, or repository: toolgate.dev/NAME)
// that is not in refs as "file:line: reference", and how often each of
// refs was named.
func scanRefs(root string, patterns []string, refs []imageRef) (bad []string, seen map[string]int, err error) {
	known, repos := map[string]bool{}, map[string]bool{}
	for _, r := range refs {
		known[r.ref] = true
		repos[r.ref[:strings.LastIndex(r.ref, ":")]] = true
	}
	seen = map[string]int{}
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile("^" + strings.NewReplacer(`\*\*/`, `(.*/)?`, `\*`, `[^/]*`).Replace(regexp.QuoteMeta(p)) + "$")
	}
	matched := make([]int, len(patterns))
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "_output") {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || d.IsDir() {
			return err
		}
		in := false
		for i, re := range res {
			if re.MatchString(filepath.ToSlash(rel)) {
				matched[i]++
				in = true
			}
		}
		if in {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for i, n := range matched {
		if n == 0 {
			return nil, nil, fmt.Errorf("%s: no files", patterns[i])
		}
	}
	for _, f := range files {
		fh, err := os.Open(filepath.Join(root, f))
		if err != nil {
			return nil, nil, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, m := range imageRefRE.FindAllString(sc.Text(), -1) {
				if !known[m] {
					bad = append(bad, fmt.Sprintf("%s:%d: %s", f, n, m))
				}
				seen[m]++
			}
			for _, m := range repoRE.FindAllStringSubmatch(sc.Text(), -1) {
				if !repos[m[1]] {
					bad = append(bad, fmt.Sprintf("%s:%d: repository %s", f, n, m[1]))
				}
			}
		}
		err = errors.Join(sc.Err(), fh.Close())
		if err != nil {
			return nil, nil, err
		}
	}
	return bad, seen, nil
}

// Every image the repository names is one of refs, and each of refs is
// named: an image renamed in one place only fails here.
func TestRefsInOnePlace(t *testing.T) {
	bad, seen, err := scanRefs("../..", refFiles, refs)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("%s: not an image of hack/images' refs", b)
	}
	for _, r := range refs {
		if seen[r.ref] == 0 {
			t.Errorf("%s (refs) is named by none of the files", r.ref)
		}
	}
}

// The scan names the file and line of a reference outside the table.
func TestScanRefsNamesTheLine(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"config/manager/manager.yaml": "spec:\n  image: toolgate.dev/toolgate:dev\n",
		"config/a/b/local.yaml":       "x: 1\n\nargs: [--runner-image=toolgate.dev/runer:dev]\n",
		"hack/values.yaml":            "image:\n  repository: \"toolgate.dev/operator\"\n",
		"hack/x.sh":                   "annotate toolgate.dev/call: x\nimage=toolgate.dev/tools:v2\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bad, seen, err := scanRefs(root, []string{"config/**/*.yaml", "hack/*.yaml", "hack/*.sh"}, refs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"config/a/b/local.yaml:3: toolgate.dev/runer:dev",
		"hack/values.yaml:2: repository toolgate.dev/operator",
		"hack/x.sh:2: toolgate.dev/tools:v2",
	}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") || seen["toolgate.dev/toolgate:dev"] != 1 {
		t.Errorf("found\n%s\nwant\n%s\n(seen %v)", strings.Join(bad, "\n"), strings.Join(want, "\n"), seen)
	}
}
