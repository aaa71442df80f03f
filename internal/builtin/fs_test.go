package builtin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/internal/codes"
)

func code(err error) string {
	var f *Error
	if errors.As(err, &f) {
		return f.Code
	}
	return ""
}

func TestFilesystemToolsStayInTheWorkspace(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cr3t"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "link-out")))
	must(os.Symlink(outside, filepath.Join(ws, "dir-out")))
	must(os.Symlink("loop-b", filepath.Join(ws, "loop-a")))
	must(os.Symlink("loop-a", filepath.Join(ws, "loop-b")))
	must(os.WriteFile(filepath.Join(ws, "ok.txt"), []byte("hello"), 0o600))

	for _, tc := range []struct {
		tool, args string
		want       string
	}{
		{Read, `{"path":"../secret"}`, codes.SandboxDenied},
		{Read, `{"path":"` + filepath.Join(outside, "secret") + `"}`, codes.SandboxDenied},
		{Read, `{"path":"link-out"}`, codes.SandboxDenied},
		{Read, `{"path":"dir-out/secret"}`, codes.SandboxDenied},
		{Read, `{"path":"a/../../secret"}`, codes.SandboxDenied},
		{Read, `{"path":"/proc/self/root/etc/passwd"}`, codes.SandboxDenied},
		{Write, `{"path":"../planted","content":"x"}`, codes.SandboxDenied},
		{Write, `{"path":"dir-out/planted","content":"x"}`, codes.SandboxDenied},
		{List, `{"path":".."}`, codes.SandboxDenied},
		{Read, `{"path":"loop-a"}`, ""}, // a loop is an error, never an escape
		{Read, `{"path":"missing"}`, codes.ToolError},
	} {
		out, err := Run(tc.tool, ws, true, tc.args)
		got := code(err)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s %s: succeeded with %q", tc.tool, tc.args, out)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s %s: %v (%q), want %s", tc.tool, tc.args, err, out, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a write escaped the workspace")
	}
}

func TestFilesystemTools(t *testing.T) {
	ws := t.TempDir()
	if out, err := Run(Write, ws, true, `{"path":"notes/today.md","content":"a b c"}`); err != nil || out != `{"bytes":5}` {
		t.Fatalf("write: %q %v", out, err)
	}
	if out, err := Run(Read, ws, false, `{"path":"notes/today.md"}`); err != nil || out != "a b c" {
		t.Fatalf("read: %q %v", out, err)
	}
	if out, err := Run(Edit, ws, true, `{"path":"notes/today.md","old":"b","new":"B"}`); err != nil || out != `{"replacements":1}` {
		t.Fatalf("edit: %q %v", out, err)
	}
	if out, err := Run(List, ws, false, `{}`); err != nil || out != `["notes/"]` {
		t.Fatalf("list: %q %v", out, err)
	}
	if _, err := Run(Write, ws, false, `{"path":"x","content":"y"}`); code(err) != codes.SandboxDenied {
		t.Fatalf("write in a read-only workspace: %v", err)
	}
	if _, err := Run(Edit, ws, true, `{"path":"notes/today.md","old":"zzz","new":"y"}`); code(err) != codes.ToolError {
		t.Fatalf("edit without a match: %v", err)
	}
}
