package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/toolgate/toolgate/internal/codes"
)

// MaxFileBytes bounds what fs.read returns and fs.write accepts.
const MaxFileBytes = 1 << 20

// Names of the built-in tools.
const (
	Read  = "fs.read"
	Write = "fs.write"
	List  = "fs.list"
	Edit  = "fs.edit"
)

// Error is a built-in tool's failure with a stable code (internal/codes).
// It is not a pipeline failure so that the in-pod runner, which runs these
// tools, links no pipeline; the runner passes Code and Message on in its
// frame and the sandbox providers turn them into the pipeline failure.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func fail(code, message string) error { return &Error{Code: code, Message: message} }

// Run runs built-in tool name with JSON arguments in the workspace at root.
// It returns the tool's output text: the file content for fs.read, JSON for
// the others.
func Run(name, root string, writable bool, arguments string) (string, error) {
	var args struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Old     string `json:"old"`
		New     string `json:"new"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", fail(codes.ToolError, "arguments: "+err.Error())
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fail(codes.ToolError, "the workspace cannot be opened")
	}
	defer func() { _ = r.Close() }()
	p := clean(args.Path)
	if lexicalEscape(p) {
		return "", fail(codes.SandboxDenied, "the path escapes the workspace")
	}
	switch name {
	case Read:
		return read(r, p)
	case List:
		return list(r, p)
	case Write, Edit:
		if !writable {
			return "", fail(codes.SandboxDenied, "the workspace is read-only")
		}
		if name == Write {
			return write(r, p, args.Content)
		}
		return edit(r, p, args.Old, args.New)
	}
	return "", fail(codes.ToolError, "unknown built-in tool "+name)
}

// clean keeps the path as the model wrote it except for an empty one, which
// means the workspace root. os.Root rejects absolute paths and escapes.
func clean(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// lexicalEscape catches escapes visible in the text itself (absolute paths,
// ".." climbing above the root) before the file system is touched, so that
// "a/../../x" is a denial even when "a" does not exist. os.Root catches the
// rest (symlinks).
func lexicalEscape(p string) bool {
	if path.IsAbs(p) || strings.HasPrefix(p, `\`) {
		return true
	}
	c := path.Clean(p)
	return c == ".." || strings.HasPrefix(c, "../")
}

// mapErr turns file system errors into stable failures.
func mapErr(err error) error {
	var perr *fs.PathError
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "path escapes from parent") || errors.Is(err, os.ErrPermission) && isEscape(err):
		return fail(codes.SandboxDenied, "the path escapes the workspace")
	case errors.Is(err, fs.ErrNotExist):
		return fail(codes.ToolError, "no such file or directory")
	case errors.As(err, &perr) && strings.Contains(perr.Err.Error(), "escapes"):
		return fail(codes.SandboxDenied, "the path escapes the workspace")
	default:
		msg := err.Error()
		if errors.As(err, &perr) {
			msg = perr.Op + ": " + perr.Err.Error() // never the path
		}
		return fail(codes.ToolError, msg)
	}
}

func isEscape(err error) bool { return strings.Contains(err.Error(), "escape") }

func read(r *os.Root, p string) (string, error) {
	f, err := r.Open(p)
	if err != nil {
		return "", mapErr(err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return "", mapErr(err)
	}
	if len(data) > MaxFileBytes {
		return "", fail(codes.ToolError, fmt.Sprintf("the file is larger than %d bytes", MaxFileBytes))
	}
	return string(data), nil
}

func list(r *os.Root, p string) (string, error) {
	f, err := r.Open(p)
	if err != nil {
		return "", mapErr(err)
	}
	defer func() { _ = f.Close() }()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return "", mapErr(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	sort.Strings(names)
	out, _ := json.Marshal(names)
	return string(out), nil
}

func write(r *os.Root, p, content string) (string, error) {
	if len(content) > MaxFileBytes {
		return "", fail(codes.ToolError, fmt.Sprintf("the content is larger than %d bytes", MaxFileBytes))
	}
	if dir := path.Dir(p); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return "", mapErr(err)
		}
	}
	if err := r.WriteFile(p, []byte(content), 0o644); err != nil {
		return "", mapErr(err)
	}
	return fmt.Sprintf(`{"bytes":%d}`, len(content)), nil
}

func edit(r *os.Root, p, old, replacement string) (string, error) {
	if old == "" {
		return "", fail(codes.ToolError, "old must not be empty")
	}
	current, err := read(r, p)
	if err != nil {
		return "", err
	}
	if n := strings.Count(current, old); n != 1 {
		return "", fail(codes.ToolError, fmt.Sprintf("old occurs %d times; it must occur exactly once", n))
	}
	if _, err := write(r, p, strings.Replace(current, old, replacement, 1)); err != nil {
		return "", err
	}
	return `{"replacements":1}`, nil
}
