package sandbox

import (
	"context"
	"errors"
	"reflect"
	"testing"

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
