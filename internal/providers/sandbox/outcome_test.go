package sandbox

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/runner"
)

// A built-in's code and message cross the runner's frame unchanged and
// become the pipeline failure the ToolCall reports.
func TestOutcomeKeepsBuiltinCodeAndMessage(t *testing.T) {
	h, out, errb := runner.Execute(context.Background(), runner.Spec{Builtin: "fs.read", Workspace: t.TempDir()}, []byte(`{"path":"../x"}`), 0)
	res, err := Outcome(h, out, errb)
	var f *pipeline.Failure
	if !errors.As(err, &f) || f.Code != pipeline.CodeSandboxDenied || f.Message != "the path escapes the workspace" || !reflect.DeepEqual(res, Result{}) {
		t.Fatalf("outcome: %v %+v", err, res)
	}
	res, err = Outcome(runner.Header{ExitCode: 3, Truncated: true, Contexts: []string{"c"}}, []byte("out"), []byte("err"))
	if err != nil || !reflect.DeepEqual(res, Result{Stdout: "out", Stderr: "err", ExitCode: 3, Truncated: true, Contexts: []string{"c"}}) {
		t.Fatalf("result: %v %+v", err, res)
	}
}

// A runner is the tool image's own when the profile names a runnerPath:
// what it reports is bounded and validated like any tool output. A code
// outside those a runner reports becomes the tool's failure (never a new
// metric label or a code that blames someone else), and a message is cut
// and made valid UTF-8.
func TestOutcomeBoundsWhatARunnerReports(t *testing.T) {
	long := strings.Repeat("\xff\"", 1<<20)
	for _, tt := range []struct {
		code string
		want pipeline.Code
	}{
		{strings.Repeat("x", 10000), pipeline.CodeToolError},
		{"policy_denied", pipeline.CodeToolError},
		{"sandbox_lost", pipeline.CodeSandboxLost},
		{"timeout", pipeline.CodeTimeout},
	} {
		_, err := Outcome(runner.Header{Code: tt.code, Error: long}, nil, nil)
		var f *pipeline.Failure
		if !errors.As(err, &f) || f.Code != tt.want {
			t.Fatalf("code %.20q: %v, want %s", tt.code, err, tt.want)
		}
		if len(f.Message) > maxRunnerMessage || !utf8.ValidString(f.Message) {
			t.Fatalf("code %.20q: a message of %d bytes (valid UTF-8: %v)", tt.code, len(f.Message), utf8.ValidString(f.Message))
		}
	}
}
