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
	"syscall"

	"github.com/toolgate/toolgate/internal/codes"
)

// MaxFileBytes bounds what fs.read returns and fs.write accepts.
const MaxFileBytes = 1 << 20

// Bounds of an fs.list answer: at most MaxListEntries entries and at most
// MaxListBytes of JSON, so that the runner's frame stays within the pod
// provider's log limit (1 MiB of output + 80 KiB). A larger directory fails
// with tool_error naming the bound instead of answering a subset: the
// directory is read in its own (unsorted) order, so a cut listing would be an
// arbitrary part of it, and the tool's output is a plain JSON array with no
// room for a "truncated" mark. The agent lists a subdirectory instead.
const (
	MaxListEntries = 10000
	MaxListBytes   = MaxFileBytes
)

// errNotRegular is the answer to reading or writing a FIFO, a device, a
// socket or a directory: a FIFO would block until the tool's timeout, a
// device could be endless.
var errNotRegular = fail(codes.ToolError, "not a regular file")

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
	args, err := decodeArgs(arguments)
	if err != nil {
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

// fsArgs are the arguments of the built-in tools.
type fsArgs struct {
	Path, Content, Old, New string
}

// decodeArgs reads the arguments by their exact keys, as the parameters
// schema, the rules and the guards read them: encoding/json matches struct
// fields case-insensitively (last wins), so {"path":"notes.txt",
// "PATH":".env"} would have read .env while every check saw notes.txt.
func decodeArgs(arguments string) (fsArgs, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(arguments), &fields); err != nil {
		return fsArgs{}, err
	}
	var a fsArgs
	for name, into := range map[string]*string{"path": &a.Path, "content": &a.Content, "old": &a.Old, "new": &a.New} {
		if raw, ok := fields[name]; ok {
			if err := json.Unmarshal(raw, into); err != nil {
				return fsArgs{}, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return a, nil
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

// openRegular opens p for flag only if it is a regular file (following
// symlinks inside the workspace). The path is checked before opening, so a
// device is never opened, and the opened file again (O_NONBLOCK, so that a
// FIFO put in its place meanwhile cannot block the open).
func openRegular(r *os.Root, p string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := r.Stat(p); err == nil && !fi.Mode().IsRegular() {
		return nil, errNotRegular
	} else if err != nil && (flag&os.O_CREATE == 0 || !errors.Is(err, fs.ErrNotExist)) {
		return nil, mapErr(err)
	}
	f, err := r.OpenFile(p, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) { // a FIFO without a reader, opened for writing
			return nil, errNotRegular
		}
		return nil, mapErr(err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		if err != nil {
			return nil, mapErr(err)
		}
		return nil, errNotRegular
	}
	return f, nil
}

func read(r *os.Root, p string) (string, error) {
	f, err := openRegular(r, p, os.O_RDONLY, 0)
	if err != nil {
		return "", err
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
	if fi, err := r.Stat(p); err != nil {
		return "", mapErr(err)
	} else if !fi.IsDir() {
		return "", fail(codes.ToolError, "not a directory")
	}
	// O_DIRECTORY: a FIFO put in its place meanwhile fails at once.
	f, err := r.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return "", fail(codes.ToolError, "not a directory")
		}
		return "", mapErr(err)
	}
	defer func() { _ = f.Close() }()
	// One entry more than the bound tells that the directory is over it,
	// without reading a huge directory whole.
	entries, err := f.ReadDir(MaxListEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", mapErr(err)
	}
	if len(entries) > MaxListEntries {
		return "", fail(codes.ToolError, fmt.Sprintf("the directory has more than %d entries, the fs.list bound; list a subdirectory", MaxListEntries))
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
	if len(out) > MaxListBytes {
		return "", fail(codes.ToolError, fmt.Sprintf("the listing is larger than %d bytes, the fs.list bound; list a subdirectory", MaxListBytes))
	}
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
	f, err := openRegular(r, p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	// Truncated only once known to be a regular file.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteString(content)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
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
