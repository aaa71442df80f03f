package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	if err := os.Symlink("notes", filepath.Join(ws, "notes-link")); err != nil {
		t.Fatal(err)
	}
	if out, err := Run(List, ws, false, `{"path":"notes-link"}`); err != nil || out != `["today.md"]` {
		t.Fatalf("list through a symlink: %q %v", out, err)
	}
	if _, err := Run(List, ws, false, `{"path":"notes/today.md"}`); code(err) != codes.ToolError {
		t.Fatalf("list of a file: %v", err)
	}
	if _, err := Run(Write, ws, false, `{"path":"x","content":"y"}`); code(err) != codes.SandboxDenied {
		t.Fatalf("write in a read-only workspace: %v", err)
	}
	if _, err := Run(Edit, ws, true, `{"path":"notes/today.md","old":"zzz","new":"y"}`); code(err) != codes.ToolError {
		t.Fatalf("edit without a match: %v", err)
	}
}

// within fails the test when f does not return well under a second (a
// blocked open of a FIFO would otherwise wait for the tool's timeout).
func within(t *testing.T, what string, unblock func(), f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(500 * time.Millisecond):
		unblock()
		t.Fatalf("%s blocked (then returned %v once unblocked)", what, <-done)
		return nil
	}
}

// TestOnlyRegularFilesAreRead: fs.read (and fs.edit, fs.write) of a FIFO, a
// device, a socket or a directory fails at once with tool_error "not a
// regular file"; it never blocks on the FIFO until the timeout.
func TestOnlyRegularFilesAreRead(t *testing.T) {
	start := time.Now()
	ws := t.TempDir()
	fifo := filepath.Join(ws, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A blocked open for reading is released by a writer, one for writing
	// by a reader: either way the test ends.
	unblock := func() {
		if f, err := os.OpenFile(fifo, os.O_RDWR, 0); err == nil {
			_ = f.Close()
		}
	}
	if err := os.Mkdir(filepath.Join(ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("unix", filepath.Join(ws, "sock")); err == nil {
		defer func() { _ = l.Close() }()
	} else {
		t.Logf("no socket: %v", err)
	}
	paths := []string{"pipe", "dir", "sock"}
	if err := syscall.Mknod(filepath.Join(ws, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
		paths = append(paths, "null")
	} else {
		t.Logf("no device node (not root?): %v", err)
	}
	if err := os.Symlink("pipe", filepath.Join(ws, "link-to-pipe")); err != nil {
		t.Fatal(err)
	}
	paths = append(paths, "link-to-pipe")
	for _, p := range paths {
		if _, err := os.Lstat(filepath.Join(ws, p)); err != nil {
			continue // the socket could not be made
		}
		for _, tc := range []struct{ tool, args string }{
			{Read, `{"path":"` + p + `"}`},
			{Edit, `{"path":"` + p + `","old":"a","new":"b"}`},
			{Write, `{"path":"` + p + `","content":"x"}`},
		} {
			err := within(t, tc.tool+" "+p, unblock, func() error { _, err := Run(tc.tool, ws, true, tc.args); return err })
			var f *Error
			if !errors.As(err, &f) || f.Code != codes.ToolError || f.Message != "not a regular file" {
				t.Errorf("%s %s: %v, want tool_error: not a regular file", tc.tool, p, err)
			}
		}
	}
	// fs.list of a FIFO is not a directory, and does not block either.
	err := within(t, "fs.list pipe", unblock, func() error { _, err := Run(List, ws, false, `{"path":"pipe"}`); return err })
	if code(err) != codes.ToolError {
		t.Errorf("list of a FIFO: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %s", took)
	}
}

// TestListIsBounded: a listing of more than 10,000 entries, or of more than
// 1 MiB of JSON, fails with tool_error naming the bound (a listing in
// directory order cut at the bound would be an arbitrary subset), so the
// frame stays within the provider's log limit.
func TestListIsBounded(t *testing.T) {
	fill := func(dir string, n, nameLen int) {
		t.Helper()
		for i := range n {
			name := fmt.Sprintf("%0*d", nameLen, i)
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			_ = f.Close()
		}
	}
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "many"), 0o755); err != nil {
		t.Fatal(err)
	}
	fill(filepath.Join(ws, "many"), 10000, 8)
	out, err := Run(List, ws, false, `{"path":"many"}`)
	if err != nil || strings.Count(out, `"`) != 2*10000 {
		t.Fatalf("10000 entries: %v (%d bytes)", err, len(out))
	}
	fill(filepath.Join(ws, "many"), 1, 9) // one more
	out, err = Run(List, ws, false, `{"path":"many"}`)
	var f *Error
	if !errors.As(err, &f) || f.Code != codes.ToolError || !strings.Contains(f.Message, "10000 entries") {
		t.Fatalf("10001 entries: %v (%d bytes)", err, len(out))
	}
	if err := os.Mkdir(filepath.Join(ws, "long"), 0o755); err != nil {
		t.Fatal(err)
	}
	fill(filepath.Join(ws, "long"), 4500, 250) // about 1.14 MB of JSON
	out, err = Run(List, ws, false, `{"path":"long"}`)
	if !errors.As(err, &f) || f.Code != codes.ToolError || !strings.Contains(f.Message, "1048576 bytes") {
		t.Fatalf("1.14 MB listing: %v (%d bytes)", err, len(out))
	}
}

// TestArgumentsAreReadByTheirExactKeys: the tool reads the field the schema,
// rules and guards checked, never one differing only in case (encoding/json
// would have read .env here, its last case-insensitive match).
func TestArgumentsAreReadByTheirExactKeys(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("notes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".env"), []byte("SECRET=1"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := Run(Read, root, false, `{"path":"notes.txt","PATH":".env","Path":".env"}`)
	if err != nil || out != "notes" {
		t.Fatalf("read %q, %v; want the file named by \"path\"", out, err)
	}
}

// FuzzArgumentsByExactKey: whatever other key an object holds, the tool's
// path is the value of the key "path" exactly.
func FuzzArgumentsByExactKey(f *testing.F) {
	for _, k := range []string{"PATH", "Path", "pAth", "path ", "ｐath", "content"} {
		f.Add(k, ".env")
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		if key == "path" {
			return
		}
		text, err := json.Marshal(map[string]string{"path": "a.txt", key: value})
		if err != nil {
			return
		}
		a, err := decodeArgs(string(text))
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if a.Path != "a.txt" {
			t.Fatalf("%s: the tool reads path %q", text, a.Path)
		}
	})
}
