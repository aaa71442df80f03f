package runner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/codes"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func TestFrameRoundTrip(t *testing.T) {
	var log bytes.Buffer
	log.WriteString("noise the runtime printed first\n")
	if err := WriteFrame(&log, key, Header{ExitCode: 3, Truncated: true}, []byte("out\nput"), []byte("err")); err != nil {
		t.Fatal(err)
	}
	r, err := ReadFrame(&log, key)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Stdout) != "out\nput" || string(r.Stderr) != "err" || r.ExitCode != 3 || !r.Truncated {
		t.Fatalf("%+v", r)
	}
}

func TestFrameCannotBeForgedOrAltered(t *testing.T) {
	var good bytes.Buffer
	if err := WriteFrame(&good, key, Header{}, []byte(`{"ok":true}`), nil); err != nil {
		t.Fatal(err)
	}
	var forged bytes.Buffer
	if err := WriteFrame(&forged, []byte("a key the tool guessed, 32 bytes"), Header{}, []byte(`{"ok":true}`), nil); err != nil {
		t.Fatal(err)
	}
	g := good.String()
	cut := strings.Index(g, "\n") + 1 // the clear line, then the sealed bytes
	flip := func(i int) string { b := []byte(g); b[i] ^= 1; return string(b) }
	for name, tc := range map[string]struct {
		log  string
		want error
	}{
		"another key":         {forged.String(), ErrForged},
		"sealed byte altered": {flip(len(g) - 1), ErrForged},
		"first sealed byte":   {flip(cut), ErrForged},
		"clear line altered":  {strings.Replace(g, `"sealed":`, `"sealed": `, 1), ErrForged},
		"payload cut":         {g[:len(g)-3], ErrIncomplete},
		"no frame":            {"just output\n", ErrNoFrame},
		"empty":               {"", ErrNoFrame},
		"clear line not json": {FramePrefix + "{nope\n", ErrForged},
		"negative size":       {FramePrefix + `{"sealed":-1,"nonce":"00"}` + "\n", ErrForged},
		"absurd size":         {FramePrefix + `{"sealed":1000000000000000000,"nonce":"000000000000000000000000"}` + "\n", ErrForged},
	} {
		if _, err := ReadFrame(strings.NewReader(tc.log), key); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// TestFrameRevealsNothingInTheLog: a log file or collector sees the frame's
// sizes, never the tool's output, stderr, contexts or error message.
func TestFrameRevealsNothingInTheLog(t *testing.T) {
	var log bytes.Buffer
	h := Header{Contexts: []string{"context-SECRET-3"}, Error: "error-SECRET-4"}
	if err := WriteFrame(&log, key, h, []byte("stdout-SECRET-1"), []byte("stderr-SECRET-2")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "SECRET") {
		t.Fatalf("the log shows the call's content: %q", log.String())
	}
	r, err := ReadFrame(&log, key)
	if err != nil || string(r.Stdout) != "stdout-SECRET-1" || string(r.Stderr) != "stderr-SECRET-2" || r.Contexts[0] != "context-SECRET-3" || r.Error != "error-SECRET-4" {
		t.Fatalf("%v %+v", err, r)
	}
}

func run(t *testing.T, spec Spec, args string) (Header, string, string) {
	t.Helper()
	if spec.ArgumentsFile == "" {
		spec.ArgumentsFile = filepath.Join(t.TempDir(), "args.json")
		if err := os.WriteFile(spec.ArgumentsFile, []byte(args), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if spec.Workspace == "" && spec.Builtin == "" {
		spec.Workspace = t.TempDir()
	}
	h, out, errb := Execute(context.Background(), spec, []byte(args), time.Second)
	return h, string(out), string(errb)
}

func TestArgvIsExact(t *testing.T) {
	hostile := []string{"$(id)", "; rm -rf /", "`touch x`", "a b", "'\"\\", "*", "", "--flag=$HOME", "\n"}
	h, out, _ := run(t, Spec{Argv: append([]string{"/usr/bin/printf", "[%s]"}, hostile...)}, `{}`)
	want := ""
	for _, a := range hostile {
		want += "[" + a + "]"
	}
	if h.ExitCode != 0 || out != want {
		t.Fatalf("exit %d, argv arrived as %q, want %q", h.ExitCode, out, want)
	}
}

func TestArgumentsReachTheToolOnStdinAndAsAFile(t *testing.T) {
	args := `{"n":123456789012345678901234567890,"s":"naïve"}`
	_, out, _ := run(t, Spec{Argv: []string{"/bin/sh", "-c", `cat; echo; cat "$TOOLGATE_ARGUMENTS_FILE"`}}, args)
	if out != args+"\n"+args {
		t.Fatalf("%q", out)
	}
}

func TestOutputBoundsAndExitCodes(t *testing.T) {
	h, out, errb := run(t, Spec{MaxOutputBytes: 100, Argv: []string{"/bin/sh", "-c", "head -c 1000 /dev/zero; head -c 20000 /dev/zero >&2; exit 42"}}, `{}`)
	if len(out) != 100 || !h.Truncated || h.ExitCode != 42 || len(errb) != MaxStderrBytes {
		t.Fatalf("stdout %d truncated %v exit %d stderr %d", len(out), h.Truncated, h.ExitCode, len(errb))
	}
	h, _, _ = run(t, Spec{Argv: []string{"/bin/sh", "-c", "kill -SEGV $$"}}, `{}`)
	if h.Signal != "segmentation fault" || h.ExitCode != 128+11 {
		t.Fatalf("signal %q exit %d", h.Signal, h.ExitCode)
	}
	h, _, _ = run(t, Spec{Argv: []string{"/nonexistent/tool"}}, `{}`)
	if h.Code != codes.ToolError || h.ExitCode != 127 {
		t.Fatalf("missing binary: %+v", h)
	}
}

func TestCancellationStopsAToolThatIgnoresSIGTERM(t *testing.T) {
	ws := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	h, _, _ := Execute(ctx, Spec{Workspace: ws, ArgumentsFile: "/dev/null", Argv: []string{"/bin/sh", "-c", "trap '' TERM; (sleep 3; touch survived) & sleep 30"}}, nil, 300*time.Millisecond)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %s", took)
	}
	if h.Signal != "killed" {
		t.Fatalf("signal %q", h.Signal)
	}
	time.Sleep(3500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(ws, "survived")); err == nil {
		t.Fatal("a child outlived the tool")
	}
}

func TestBuiltinsThroughTheRunner(t *testing.T) {
	ws := t.TempDir()
	if h, out, _ := run(t, Spec{Builtin: "fs.write", Workspace: ws, Writable: true}, `{"path":"a.txt","content":"hi"}`); h.Code != "" || out != `{"bytes":2}` {
		t.Fatalf("write: %+v %q", h, out)
	}
	if h, _, _ := run(t, Spec{Builtin: "fs.read", Workspace: ws}, `{"path":"../../etc/passwd"}`); h.Code != codes.SandboxDenied {
		t.Fatalf("escape: %+v", h)
	}
	if h, _, _ := run(t, Spec{Builtin: "fs.write", Workspace: ws}, `{"path":"b.txt","content":"x"}`); h.Code != codes.SandboxDenied {
		t.Fatalf("read-only write: %+v", h)
	}
}

// TestDeferredContexts: a tool defers messages one per line of
// $TOOLGATE_CONTEXTS_FILE; they travel in the authenticated header,
// bounded, and the file is gone afterwards.
func TestDeferredContexts(t *testing.T) {
	script := `printf 'verify the report\n\n  check the totals  \n' >> "$TOOLGATE_CONTEXTS_FILE"; echo "$TOOLGATE_CONTEXTS_FILE"`
	h, out, _ := run(t, Spec{Argv: []string{"/bin/sh", "-c", script}}, `{}`)
	if want := []string{"verify the report", "check the totals"}; !slices.Equal(h.Contexts, want) {
		t.Fatalf("contexts %q, want %q", h.Contexts, want)
	}
	if _, err := os.Stat(strings.TrimSpace(out)); !os.IsNotExist(err) {
		t.Errorf("the contexts file is left behind: %v", err)
	}
	flood := `i=0; while [ $i -lt 40 ]; do printf '%05000d\n' $i >> "$TOOLGATE_CONTEXTS_FILE"; i=$((i+1)); done`
	h, _, _ = run(t, Spec{Argv: []string{"/bin/sh", "-c", flood}}, `{}`)
	if len(h.Contexts) != MaxContexts || len(h.Contexts[0]) != MaxContextBytes {
		t.Errorf("%d contexts, the first %d bytes: the bounds are %d and %d", len(h.Contexts), len(h.Contexts[0]), MaxContexts, MaxContextBytes)
	}
}
